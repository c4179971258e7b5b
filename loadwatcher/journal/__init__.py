"""The SQLite journal: samples and the last snapshot survive a restart.

``sqlite`` holds ``Journal`` (reads and writes), ``schema`` the tables and the checks a file
passes at open, ``codec`` a cycle's samples as packed arrays.
"""
