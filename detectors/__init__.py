"""Streaming anomaly detectors (river contract: ``learn_one`` / ``score_one``, higher = more
anomalous), label-free calibration, the alarm layer, the count gate of sparse event counters,
the per-series monitor the pipeline uses and a vectorised bank for many series at once.

Univariate detectors take a float (and, for the daily profile, a timestamp ``t``); detectors
of several inputs take a mapping of named inputs (documented per class).
"""

from detectors.alerting import Alerter
from detectors.bank import BankResult, EnsembleBank
from detectors.calibrate import AdaptiveThreshold
from detectors.counts import CountGate
from detectors.cusum import Cusum
from detectors.energy import EnergyPerRequest
from detectors.ensemble import Ensemble
from detectors.forecast import ForecastResidual
from detectors.kv_cache import KvCacheSaturation
from detectors.latency_load import LatencyLoadRegression
from detectors.monitor import MonitorBank, MonitorEvent, Observation, SeriesMonitor
from detectors.ratio import BinomialRatio
from detectors.robust_zscore import RobustZScore
from detectors.seasonal import SeasonalProfile
from detectors.spec_accept import SpecAcceptCollapse
from detectors.window_outlier import WindowOutlier

__all__ = [
    "AdaptiveThreshold",
    "Alerter",
    "BankResult",
    "BinomialRatio",
    "CountGate",
    "Cusum",
    "EnergyPerRequest",
    "Ensemble",
    "EnsembleBank",
    "ForecastResidual",
    "KvCacheSaturation",
    "LatencyLoadRegression",
    "MonitorBank",
    "MonitorEvent",
    "Observation",
    "RobustZScore",
    "SeasonalProfile",
    "SeriesMonitor",
    "SpecAcceptCollapse",
    "WindowOutlier",
]
