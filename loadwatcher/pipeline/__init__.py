"""The poll pipeline: store, rollups, analysis, snapshot, health, and the engine that runs them."""
