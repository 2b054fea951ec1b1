"""The read side: finding and opening states, and reading across the shards of worker
states (reading.states, reading.shards)."""
