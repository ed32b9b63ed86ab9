"""Every process with this folder on PYTHONPATH (bench/gpu_host.sh, where PyAV is missing) gets
the empty PyAV stand-in of pyav_finder.py."""

import pyav_finder

pyav_finder.install()
