"""Calibration and validation against the machine: microbenchmarks, fitted ceilings, measured runs.

Needs torch (it measures with it); the rest of narrowpipe does not import this package.
"""

from .calibrate import calibrate, check_measured_threads, load_measurements, measured_threads, measurements_path
from .fit import apply_measurements, fit_curves, host_target
from .host import HostCpu, describe_cpu
from .sweeps import Measurement

__all__ = ["calibrate", "check_measured_threads", "load_measurements", "measurements_path", "measured_threads",
           "apply_measurements", "fit_curves", "host_target", "HostCpu", "describe_cpu", "Measurement"]
