"""State: a small key-value interface (memory or RocksDB) and the typed transaction the
engine reads and writes through. Every batch commits atomically with its input position."""
