"""planner: an ILP sharding planner that shards only what shapecore proves divides evenly."""
