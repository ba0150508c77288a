"""The pieces of bench/run.py (the HTTP/1.1 and HTTP/2 peer benchmark)."""
