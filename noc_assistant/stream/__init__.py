"""The streaming core: points in, findings and incidents out.

- :mod:`.pipeline`: one process's pipeline (series store → KPIs → detectors → correlator);
- :mod:`.correlate`: findings → incidents (topology scope, maintenance, raised bars);
- :mod:`.fanin`: one network-wide correlation over detector workers that each watch a slice;
- :mod:`.checkpoint`: signed snapshots, so that a restart resumes instead of re-learning.
"""
