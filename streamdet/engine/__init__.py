"""The pure engine: text -> tokens -> grams -> postings -> patch sets -> covers -> events.

Nothing in this package touches sockets, files or clocks; adapters feed it records and a
state transaction and write out what it returns.
"""
