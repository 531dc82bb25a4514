"""Installing tritonblas never makes pip replace the user's torch: pip's resolver, offline, on tiny fake
wheels whose metadata is what matters (each torch's triton pin, the package's torch/triton/numpy
requirements read from pyproject.toml), resolves the package beside every supported torch. And the one
numpy limit (triton 3.6's interpreter breaks with numpy >= 2.4) is reported at run time, not pinned."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tritonblas import device

tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml with Python 3.11's tomllib")
# Asked in a subprocess, not imported or looked up here: even importlib.util.find_spec("pip") makes
# setuptools' distutils shim step aside for the rest of the process (_distutils_hack's spec_for_pip), and
# torch.compile's inductor then fails to build its C++ checks in later tests.
if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
    pytest.skip("needs pip", allow_module_level=True)

PYPROJECT = Path(__file__).parent.parent / "pyproject.toml"
# Each torch's CUDA wheel pins one triton (2.10.0 to 2.15.0: read from the wheels' metadata); 2.9.1, here
# pinning a triton older than 3.6, stands for the torches the package does not support (pip must refuse).
TORCH_TRITON = {
    "2.9.1": "triton==3.5.1",
    "2.10.0": "triton==3.6.0",
    "2.11.0": "triton==3.6.0",
    "2.12.0": "triton==3.7.0",
    "2.13.0": "triton==3.7.1",
    "2.14.0": "triton~=3.8.0",
    "2.15.0": "triton==3.9.0",
}
SUPPORTED_TORCH = "2.10.0"  # the oldest; TORCH_TRITON's torches from it on must resolve
TRITONS = ["3.5.1", "3.6.0", "3.7.0", "3.7.1", "3.8.0", "3.9.0", "3.10.0"]
NUMPYS = ["2.2.6", "2.3.5", "2.4.6"]
# Environments a user already has (torch, and the triton beside it): a CPU box's torch needs no triton.
INSTALLED = [("2.13.0+cpu", "3.6.0"), ("2.14.0", "3.8.0")]
OWN = ("torch", "triton", "numpy")
# (triton, numpy, whether the interpreter refuses to start): 3.6's breaks on numpy 2.4, 3.7's does not.
INTERPRETER_VERSIONS = [("3.6.0", "2.2.6", False), ("3.6.0", "2.3.5", False), ("3.6.0", "2.4.0", True),
                        ("3.6.1", "2.4.6", True), ("3.7.0", "2.4.6", False), ("3.9.0", "2.4.6", False),
                        ("3.10.0+git1a2b", "2.5.0.dev0", False), ("4.0.0", "3.0.0", False)]


def package_requirements() -> list[str]:
    """pyproject.toml's torch, triton and numpy requirements, as written."""
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    own = [d for d in deps if Requirement(d).name in OWN]
    assert sorted(Requirement(d).name for d in own) == sorted(OWN), deps
    return own


def write_wheel(where: Path, name: str, version: str, requires: list[str]) -> None:
    """A wheel that installs nothing but its metadata: all pip's resolver reads."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{info}/METADATA": "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                                     *(f"Requires-Dist: {r}\n" for r in requires)]),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(where / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("wheels")
    for version, pin in TORCH_TRITON.items():
        write_wheel(where, "torch", version, [pin])
    # Apart: `torch==2.13.0` would take it over the CUDA wheel of the same version.
    (where / "cpu").mkdir()
    write_wheel(where / "cpu", "torch", "2.13.0+cpu", [])
    for name, versions in (("triton", TRITONS), ("numpy", NUMPYS)):
        for version in versions:
            write_wheel(where, name, version, [])
    write_wheel(where, "tritonblas", "0.1.0", package_requirements())
    return where


def pip(*args: str, python: str = sys.executable) -> subprocess.CompletedProcess:
    """This interpreter's pip, offline, blind to the machine's pip configuration (an index, a constraint
    file capping torch) and to PYTHONPATH (a triton or tritonblas found there counts as installed), so
    that only the fake wheels and what a test installed decide."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1",
               PYTHONNOUSERSITE="1")
    return subprocess.run([sys.executable, "-m", "pip", "--python", python, *args, "--no-index",
                           "--no-cache-dir"], env=env, capture_output=True, text=True, timeout=120)


def dry_run(wheels: Path, report: Path, *requirements: str, python: str = sys.executable) -> dict[str, str]:
    """What `pip install` would install, {name: version}; {} when pip refuses."""
    run = pip("install", "--dry-run", "--find-links", str(wheels), "--report", str(report), *requirements,
              python=python)
    if run.returncode:
        assert "ResolutionImpossible" in run.stderr or "conflict" in run.stderr, run.stderr
        return {}
    return {item["metadata"]["name"]: item["metadata"]["version"]
            for item in json.loads(report.read_text())["install"]}


@pytest.mark.parametrize("version", TORCH_TRITON)
def test_the_package_resolves_beside_each_torch(wheels, tmp_path, version):
    plan = dry_run(wheels, tmp_path / "report.json", "--ignore-installed", f"torch=={version}", "tritonblas")
    if Version(version) < Version(SUPPORTED_TORCH):
        assert plan == {}, f"torch {version} pins a triton older than 3.6: pip must refuse, not swap: {plan}"
        return
    assert plan, f"pip refuses to install the package beside torch {version}"
    assert plan["torch"] == version and plan["tritonblas"] == "0.1.0", plan
    assert Version(plan["triton"]) in SpecifierSet(TORCH_TRITON[version].removeprefix("triton")), plan
    assert plan["numpy"] == NUMPYS[-1], f"numpy is capped for every user: {plan}"


@pytest.mark.parametrize(("torch_version", "triton_version"), INSTALLED)
def test_installing_the_package_leaves_an_installed_torch_alone(wheels, tmp_path, torch_version,
                                                                triton_version):
    """The issue's case: a venv holding torch and its triton; `pip install tritonblas` installs the package
    and numpy only (it once replaced a torch 2.14 with 2.13.0+cpu and triton 3.8.0 with 3.6.0)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    setup = pip("install", "--find-links", str(wheels), "--find-links", str(wheels / "cpu"),
                f"torch=={torch_version}", f"triton=={triton_version}", python=python)
    assert setup.returncode == 0, setup.stderr
    plan = dry_run(wheels, tmp_path / "report.json", "tritonblas", python=python)
    assert plan == {"tritonblas": "0.1.0", "numpy": NUMPYS[-1]}, plan


@pytest.mark.parametrize(("triton", "numpy", "refused"), INTERPRETER_VERSIONS)
def test_interpreter_versions(triton, numpy, refused):
    problem = device.interpreter_problem(triton, numpy)
    assert (problem is not None) == refused, problem
    if refused:
        assert f"triton {triton}" in problem and f"numpy {numpy}" in problem and "numpy<2.4" in problem


@pytest.mark.parametrize(("value", "on"),
                         [("1", True), ("yes", True), ("0", False), ("", False), (None, False)])
def test_the_interpreter_is_on_as_the_environment_says_now(monkeypatch, value, on):
    """interpreter_enabled reads os.environ's own mapping (a plan lookup asks per call): a change made
    after import is seen at once."""
    monkeypatch.setenv("TRITON_INTERPRET", "0" if on else "1")
    assert device.interpreter_enabled() is not on
    if value is None:
        monkeypatch.delenv("TRITON_INTERPRET")
    else:
        monkeypatch.setenv("TRITON_INTERPRET", value)
    assert device.interpreter_enabled() is on


def test_the_interpreter_refuses_to_start_on_a_numpy_it_breaks_on(monkeypatch):
    import numpy
    import triton

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    monkeypatch.setattr(numpy, "__version__", "2.4.0")
    device.interpreter_device.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"triton 3\.6\.0's interpreter .* numpy 2\.4\.0"):
            device.device_info(torch.device("cpu"))
        with pytest.raises(RuntimeError, match="numpy<2.4"):
            device.tensor_device_info(torch.zeros(1))
        monkeypatch.setattr(numpy, "__version__", "2.3.5")
        assert device.device_info(torch.device("cpu")) is device.INTERPRETER_DEVICE
    finally:
        device.interpreter_device.cache_clear()

