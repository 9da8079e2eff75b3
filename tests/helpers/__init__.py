"""Test helpers: the child processes crash tests kill, the Azurite and moto servers, Spark sessions, Hypothesis strategies."""
