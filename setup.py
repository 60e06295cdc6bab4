"""The package layout, which pyproject.toml cannot compute: one import namespace, ``conv3d_bwd``.

The repository keeps its subpackages at the root (``kernels/``, ``reference/``, ``nkisim/``, ``verify/``);
the distribution installs them as ``conv3d_bwd.kernels`` and so on (``package_dir`` maps each name to its
folder), so that nothing but ``conv3d_bwd`` lands at the top level of site-packages. Everything else is in
pyproject.toml.
"""
from setuptools import find_packages, setup

NAMESPACE = "conv3d_bwd"
SUBPACKAGES = ("kernels", "reference", "nkisim", "verify")

setup(
    packages=[NAMESPACE] + [f"{NAMESPACE}.{name}" for name in find_packages(include=[f"{s}*" for s in SUBPACKAGES])],
    package_dir={NAMESPACE: NAMESPACE, **{f"{NAMESPACE}.{s}": s for s in SUBPACKAGES}},
)
