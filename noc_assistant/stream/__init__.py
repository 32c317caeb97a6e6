"""The streaming core: points in, findings and incidents out.

- :mod:`.pipeline`: one process's pipeline (series store → KPIs → detectors → correlator),
  composed of its parts: :mod:`.topology_guess` (entity types and a topology from the
  telemetry), :mod:`.clock` (the scrape interval and evaluation ticks), :mod:`.evaluate`
  (each entity's KPIs as observations), :mod:`.liveness` (silent entities) and
  :mod:`.network` (the network-wide correlator's merge of workers' ticks);
- :mod:`.replay`: a replay file through the whole pipeline (``noc eval run``);
- :mod:`.correlate`: findings → incidents (topology scope, maintenance, raised bars);
- :mod:`.fanin`: one network-wide correlation over detector workers that each watch a slice;
- :mod:`.checkpoint`: signed snapshots, so that a restart resumes instead of re-learning.
"""
