"""InfluxDB: raw Telegraf points over InfluxQL or Flux."""
