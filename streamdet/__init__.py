"""streamdet: a streaming, exact detector of quilted web pages.

Layers (imports point down only): cli -> adapters -> engine -> state.
The engine is pure: no sockets, files or clocks.
"""

__version__ = "0.1.0"
