"""`simpleperf lab web`: the labs that are up as a live page. counters.py reads every
interface's counters inside the labs' namespaces, views.py turns the model and the counters
into what the page draws (pure), app.py serves it (loopback and a token by default), and
static/ is the page, its vendored libraries beside their licences."""
