"""``webhook-inbox console``: a web console on loopback over the operator commands.

:mod:`.guard` decides who may talk to it (host, origin, one-time token), :mod:`.server` serves
HTTP on 127.0.0.1, :mod:`.pages` turns each page into operator requests through the CLI's
backend (dev's or a stack's operator function), :mod:`.views` and ``templates/`` render them,
``static/`` holds the stylesheet, the plot script and the vendored htmx and uPlot (with their
licences). Installed with the tools, never in a Lambda layer.
"""
