"""Crash tests: SIGKILL at named points and at random, restart, every row once."""
