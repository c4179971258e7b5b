"""The wire formats of a snapshot (default and KEP), their JSON Schemas, their bytes."""
