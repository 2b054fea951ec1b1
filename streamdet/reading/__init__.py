"""The read side: finding and opening states (reading.states), reading across the shards
of worker states (reading.shards), and the views over a state that `dump`, `explain`,
`text`, `similar`, `phrases` and `sites` print (reading.views, explain, similar,
phrases)."""
