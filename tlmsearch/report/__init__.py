"""Reports of a run dir: an offline HTML file, a live dashboard and PNG figures.

``tlmsearch report RUN`` writes ``RUN/report.html``; ``tlmsearch dashboard RUN`` serves a live
view on 127.0.0.1. Neither needs torch or Ray: only the run dir (see docs/run_dir.md).
Modules: :mod:`.collect` (pure DataFrame -> table functions), :mod:`.effects` (collect
functions for effects in units of noise, the separation matrix and the race), :mod:`.figures`
(plotly), :mod:`.html` (the page), :mod:`.dashboard` (live server), :mod:`.images` (PNG via
kaleido).
"""
