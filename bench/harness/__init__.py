"""bench/run's modules (the harness); bench/run is the entry point."""
