"""The SQLite journal: samples and the last snapshot survive a restart."""
