"""The sink and readers under Spark Connect."""
