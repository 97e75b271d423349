"""``make install`` and ``make wheels`` (Makefile): the commands they run, in order.

Standard library only, so that any python3 >= 3.8 runs it before a venv exists; it never
imports torch: with ``TORCH=system`` it asks ``--python``, in a subprocess, for its torch's
version and site folders. It echoes each command as make would (``--quiet``: make -s),
prints them without running anything (``--dry-run``: make -n), and with ``--check`` prints
the one line that would stop it, for make to stop with. Run from the Makefile; README
(Installing) and docs/gpus.md (Installing on a cluster) say what each step is for.
"""

import argparse
import email.parser
import functools
import glob
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections import namedtuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The package's extras and their requirements (stdlib Python, read by path, as setup.py
#: reads it): the one table of them.
EXTRAS_FILE = os.path.join("sparse_attn_plugin", "extras.py")
#: What the install is made from: one newer than the stamp makes the stamp out of date.
INPUTS = ("setup.py", "pyproject.toml", "requirements-dev.txt", "Makefile", "tools/install.py",
          EXTRAS_FILE)


def load_extras():
    """sparse_attn_plugin/extras.py as a module of its own (the package is not imported)."""
    spec = importlib.util.spec_from_file_location("sparse_attn_extras",
                                                  os.path.join(ROOT, EXTRAS_FILE))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


extras = load_extras()
#: fairseq-fixed's real runtime needs, the [fairseq] extra (its metadata also pulls
#: torchaudio, which it never uses); tensorboardX serves --tensorboard-logdir (and silences
#: fairseq's import notice).
FAIRSEQ_NEEDS = extras.specs("fairseq")
#: The optional parts, installed (downloaded) unless WITHOUT names them. meteor: Meteor 1.5
#: (jar and English paraphrases, 100 MB) for sparse-attn-score's METEOR, installed without
#: its unused pycocotools need (which pulls matplotlib; pip cannot leave a need of an
#: extra's requirement out, so it is no extra); lint: ruff, for make lint; hf:
#: transformers, for sparse_attn_plugin.huggingface's tests (tiny models from configs,
#: nothing downloaded; 5.24 is the version tested; it does not depend on torch, so never
#: replaces it). lint and hf are the extras of those names.
OPTIONAL_SPECS = {"meteor": ("pycocoevalcap==1.2",), "lint": extras.specs("lint"),
                  "hf": extras.specs("hf")}
#: The extras installed with the package (the others are OPTIONAL_SPECS' or the tests').
PACKAGE_EXTRAS = tuple(sorted(set(extras.EXTRAS) - set(OPTIONAL_SPECS)
                              - set(extras.DEVELOPMENT)))
#: PyPI has these only as sources; pure Python, their wheels build anywhere.
SDIST_ONLY = ("antlr4-python3-runtime==4.9.3",)
#: The [test] extra's reference, entmax, installed beside requirements-dev.txt's tools: it
#: needs torch, which make wheels leaves out, so its other needs are read from its wheel's
#: metadata and downloaded with the rest.
NEED_TORCH = extras.specs("test")
#: manylinux's legacy names and the glibc minor version each stands for.
LEGACY_MANYLINUX = ((17, "manylinux2014"), (12, "manylinux2010"), (5, "manylinux1"))
#: What TORCH=system asks PYTHON, without importing torch: torch's version, its own Python
#: version, triton's ("none" if absent), the folder holding torch, and its site folders (in
#: sys.path order; that folder first if it is none of them). Nothing printed: no torch.
FIND_TORCH = """\
import importlib.metadata, importlib.util, os, site, sys
spec = importlib.util.find_spec("torch")
places = spec and spec.submodule_search_locations
folder = places and os.path.dirname(list(places)[0])
def version(name):
    return next((d.version for d in importlib.metadata.distributions(name=name)), "none")
if folder:
    sites = set(getattr(site, "getsitepackages", list)())
    if site.ENABLE_USER_SITE:
        sites.add(site.getusersitepackages())
    found = [path for path in sys.path if path == folder or path in sites]
    print(version("torch"), "%d.%d" % sys.version_info[:2], version("triton"), folder,
          *([] if folder in found else [folder]), *found)
"""
PYTHON_VERSION = 'import sys; print("%d.%d" % sys.version_info[:2])'

#: A Python's torch, as FIND_TORCH tells it.
SystemTorch = namedtuple("SystemTorch", "version python triton folder sites")


def parse_probe(output):
    """FIND_TORCH's answer as a :class:`SystemTorch`, or None where it printed nothing."""
    words = output.split()
    return SystemTorch(*words[:4], sites=words[4:]) if len(words) >= 4 else None


def probe_torch(python):
    """The torch of the interpreter ``python``, asked in a subprocess; None without one."""
    try:
        answer = subprocess.run([python, "-c", FIND_TORCH], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, universal_newlines=True).stdout
    except OSError:
        return None
    return parse_probe(answer)


def python_version(python):
    """The interpreter ``python``'s version, X.Y."""
    return subprocess.run([python, "-c", PYTHON_VERSION], stdout=subprocess.PIPE,
                          universal_newlines=True).stdout.strip()


def pth_text(system):
    """The .pth file that adds ``system``'s site folders after the venv's own, as
    --system-site-packages does for a base interpreter (which misses a venv's or conda's)."""
    return "".join(f"import site; site.addsitedir('{path}')\n" for path in system.sites)


def pins_text(system):
    """The pip constraints that make pip count ``system``'s torch and triton as installed."""
    return "".join(f"{name}=={version}\n" for name, version in (
        ("torch", system.version), ("triton", system.triton)) if version != "none")


def without_triton(requirements):
    """``requirements`` (a requirements file's text) less its triton line: a system torch
    brings its own."""
    return "".join(line for line in requirements.splitlines(True)
                   if not line.startswith("triton"))


def without_problem(without):
    """Why WITHOUT (space-separated) is refused, or "" when it names optional parts only."""
    if set(without.split()) <= set(OPTIONAL_SPECS):
        return ""
    return f"WITHOUT={without}: the optional parts are {' '.join(OPTIONAL_SPECS)}"


def platform_tags(platforms):
    """Each of ``platforms`` (space-separated) with the older tags its wheels may carry:
    pip (23.2) takes manylinux_2_X literally, so manylinux_2_28 brings 2_27 down to 2_5 and
    the legacy names of those (manylinux2014 for 2_17, ...)."""
    tags = []
    for platform in platforms.split():
        tags.append(platform)
        match = re.fullmatch(r"manylinux_2_(\d+)_(.+)", platform)
        if match:
            glibc, arch = int(match[1]), match[2]
            tags += [f"manylinux_2_{minor}_{arch}" for minor in range(glibc - 1, 4, -1)]
            tags += [f"{name}_{arch}" for floor, name in LEGACY_MANYLINUX if glibc >= floor]
    return tags


def stamp_text(spec, without):
    """The stamp: the spec installed on its first line, the optional parts left out on its
    second (in order, each once)."""
    return f"{spec}\nwithout: {' '.join(sorted(set(without.split())))}\n"


def stamp_is_current(stamp, text, inputs=INPUTS):
    """Whether the stamp file ``stamp`` holds ``text`` (whitespace aside) and none of
    ``inputs`` is newer: then the install is up to date."""
    try:
        with open(stamp) as held:
            words = held.read().split()
        made = os.stat(stamp).st_mtime_ns
    except OSError:
        return False
    return words == text.split() and all(os.stat(path).st_mtime_ns <= made for path in inputs)


def stamped_spec(stamp):
    """The spec the stamp ``stamp`` was installed with (its first line), "" if none."""
    try:
        with open(stamp) as held:
            return held.readline().rstrip("\n")
    except OSError:
        return ""


def wheel_needs(wheels, extras=()):
    """What the ``wheels`` (paths) require, with the needs of their ``extras`` (names), but
    for other extras' needs, torch and entmax."""
    needs = []
    for path in wheels:
        with zipfile.ZipFile(path) as wheel:
            metadata = next(name for name in wheel.namelist()
                            if name.endswith(".dist-info/METADATA"))
            headers = email.parser.HeaderParser().parsestr(wheel.read(metadata).decode())
        for need in headers.get_all("Requires-Dist", []):
            # an extra's need: "NEED; extra == 'X'" or "NEED; (MARKER) and extra == 'X'"
            extra = re.search(r"""(\s*;|\s+and) *extra *== *["']([\w.-]+)["'] *$""", need)
            if extra and extra[2] in extras:
                need = need[:extra.start()]
            if not re.search(r"extra *==", need) and not re.match(r"(torch|entmax)\b", need):
                needs.append(need)
    return needs


def succeeds(argv):
    """Whether ``argv`` runs and exits with 0 (unseen)."""
    try:
        return subprocess.call(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0
    except OSError:
        return False


class Installer:
    """The steps of make install and make wheels for the Makefile's settings ``args``, with
    the folder ``scratch`` for the files pip reads."""

    def __init__(self, args, scratch):
        self.args, self.scratch = args, scratch
        self.dry, self.quiet = args.dry_run, args.quiet and not args.dry_run
        self.venv_python = os.path.join(args.venv, "bin", "python")
        self.stamp = os.path.join(args.venv, ".installed")
        self.rebuild = os.path.join(args.venv, ".rebuild")
        self.pins = os.path.join(args.venv, "system-torch.txt")
        self.torch_is_system = args.torch == "system"
        self.replacing = False  # another torch than the stamp's: fairseq is rebuilt
        self.numpy_spec = "numpy>=1.24" if self.torch_is_system else "numpy>=1.24,<2.3"
        without = args.without.split()
        self.meteor = list(OPTIONAL_SPECS["meteor"]) if "meteor" not in without else []
        self.tool_specs = [spec for part, specs in OPTIONAL_SPECS.items()
                           if part not in without and part != "meteor" for spec in specs]
        self.pip = [self.venv_python, "-m", "pip", "--disable-pip-version-check"]
        # WHEELS=DIR: that folder alone, no index; TORCH=system: its torch pinned
        from_wheels = ["--no-index", "--find-links", args.wheels] if args.wheels else []
        self.pip_install = [*self.pip, "install", *from_wheels,
                            *(["-c", self.pins] if self.torch_is_system else [])]

    @functools.cached_property
    def system(self):
        """The torch of --python (TORCH=system)."""
        return probe_torch(self.args.python)

    @functools.cached_property
    def spec(self):
        """What the stamp's first line records: torch and fairseq as asked for."""
        if self.torch_is_system:
            words = [f"torch=system:{self.system.version}:{self.system.folder}"]
        else:
            words = [self.args.torch, self.args.torch_index]
        return " ".join(" ".join([*words, self.args.fairseq]).split())

    def problem(self):
        """The one line that stops this command before it runs anything, or ""."""
        refused = without_problem(self.args.without)
        if refused:
            return refused
        if self.args.command == "wheels" and not self.args.wheels:
            return "make wheels: name the folder, e.g. make wheels WHEELS=/tmp/wheels"
        if self.args.command == "install" and self.torch_is_system and not self.system:
            return (f"make install TORCH=system: {self.args.python} has no torch; name one "
                    "that has: PYTHON=/path/to/python")
        return ""

    def say(self, line):
        """Print ``line``, as make echoes a command (not under make -s)."""
        if not self.quiet:
            print(line, flush=True)

    def run(self, *argv, check=True, unless=None):
        """Echo and run ``argv``; its failure ends this command, unless not ``check``. With
        ``unless``, make's ``UNLESS 2>/dev/null || ARGV``: a probe whose success makes
        ``argv`` needless. Whether it succeeded (a dry run succeeds)."""
        self.say(shlex.join(argv) if unless is None
                 else f"{shlex.join(unless)} 2>/dev/null || {shlex.join(argv)}")
        if self.dry or (unless is not None and succeeds(unless)):
            return True
        code = subprocess.call(argv)
        if code and check:
            sys.exit(code)
        return code == 0

    def write(self, path, text):
        """Write ``text`` into the file ``path`` (not in a dry run)."""
        self.say(f"write {path}")
        if not self.dry:
            with open(path, "w") as file:
                file.write(text)

    def scratch_file(self, name, text):
        """A file in the scratch folder holding ``text``; its path."""
        path = os.path.join(self.scratch, name)
        with open(path, "w") as file:
            file.write(text)
        return path

    def dev_requirements(self):
        """requirements-dev.txt, less triton with TORCH=system."""
        if not self.torch_is_system:
            return "requirements-dev.txt"
        with open("requirements-dev.txt") as requirements:
            return self.scratch_file("requirements-dev-without-triton.txt",
                                     without_triton(requirements.read()))

    def install(self):
        """make install: nothing if the stamp is current, else every step and the stamp."""
        if stamp_is_current(self.stamp, stamp_text(self.spec, self.args.without)):
            return
        self.run(self.args.python, "-m", "venv", self.args.venv,
                 unless=["test", "-x", self.venv_python])
        self.replace_another_torch()
        if self.torch_is_system:
            self.link_system_torch()
        else:
            index = [] if self.args.wheels else shlex.split(self.args.torch_index)
            self.run(*self.pip_install, *index, self.args.torch)
        self.run(*self.pip_install, self.numpy_spec, "cython", "setuptools", "wheel")
        self.install_fairseq()
        self.run(*self.pip_install, *FAIRSEQ_NEEDS)
        self.run(*self.pip_install, "-r", self.dev_requirements(), *NEED_TORCH,
                 *self.tool_specs)
        if self.meteor:
            self.run(*self.pip_install, "--no-deps", *self.meteor)
        self.run(*self.pip_install, "--no-build-isolation", "-e",
                 f".[{','.join(PACKAGE_EXTRAS)}]")
        self.run(self.venv_python, "-c", "import torch, fairseq, entmax, sparse_attn_plugin; "
                 'print("torch", torch.__version__, "| fairseq", fairseq.__version__)')
        self.write(self.stamp, stamp_text(self.spec, self.args.without))

    def replace_another_torch(self):
        """Where the stamp records another spec: unlink a system torch, uninstall torch and
        fairseq, and mark fairseq for a rebuild without pip's wheel cache (its extensions
        link torch; the cache would hand back ones built against the old torch)."""
        was = stamped_spec(self.stamp)
        if not was or was == self.spec:
            return
        print(f"make install: installed with '{was}', asked for '{self.spec}': "
              "replacing torch and rebuilding fairseq", flush=True)
        if not self.dry:
            for link in glob.glob(os.path.join(self.args.venv, "lib", "python*",
                                               "site-packages", "_system_torch.pth")):
                os.remove(link)
            if os.path.exists(self.pins):
                os.remove(self.pins)
        self.run(*self.pip, "uninstall", "-y", "torch", "fairseq-fixed")
        self.write(self.rebuild, "")
        self.replacing = True

    def link_system_torch(self):
        """TORCH=system: the venv sees --python's site folders (a .pth file), pins its torch
        and triton, and is checked to import that torch."""
        system = self.system
        same_python = f'import sys; sys.exit("%d.%d" % sys.version_info[:2] != "{system.python}")'
        if not self.dry and not succeeds([self.venv_python, "-c", same_python]):
            sys.exit(f"make install: {self.args.venv} is not Python {system.python}, as "
                     f"{self.args.python} is: make clean-venv")
        site = os.path.join(self.args.venv, "lib", f"python{system.python}", "site-packages")
        self.write(os.path.join(site, "_system_torch.pth"), pth_text(system))
        self.write(self.pins, pins_text(system))
        self.run(self.venv_python, "-W", "ignore", "-c", 'import sys, torch; print("torch", '
                 'torch.__version__, "from", torch.__file__); '
                 f'sys.exit(not torch.__file__.startswith("{system.folder}/"))')

    def install_fairseq(self):
        """fairseq-fixed without its metadata's needs (torchaudio) nor an isolated build (it
        would fetch another torch); with TORCH=system its own, even where --python has one."""
        if self.torch_is_system:
            probe = "import sys, fairseq; sys.exit(not fairseq.__file__.startswith(sys.prefix))"
            options = ["--ignore-installed"]
        else:
            probe, options = "import fairseq", []
        if self.replacing or os.path.exists(self.rebuild):
            options.append("--no-cache-dir")
        self.run(*self.pip_install, "--no-deps", "--no-build-isolation", *options,
                 self.args.fairseq, unless=[self.venv_python, "-c", probe])
        if not self.dry and os.path.exists(self.rebuild):
            os.remove(self.rebuild)

    @functools.cached_property
    def wheels_python(self):
        """The Python version make wheels downloads for: --wheels-python, else --python's."""
        return self.args.wheels_python or python_version(self.args.python)

    def download(self, *argv, check=True):
        """pip download of binary wheels for that Python version and platform."""
        platforms = [word for tag in platform_tags(self.args.wheels_platform)
                     for word in ("--platform", tag)]
        return self.run(self.args.python, "-m", "pip", "--disable-pip-version-check",
                        "download", "--dest", self.args.wheels, "--only-binary=:all:",
                        "--python-version", self.wheels_python, *platforms, *argv, check=check)

    def build_wheel(self, *sources, options=()):
        """pip wheel of ``sources`` (specs or a folder) by --python, into the wheels folder."""
        self.run(self.args.python, "-m", "pip", "wheel", "--no-deps", *options, "--wheel-dir",
                 self.args.wheels, *sources)

    def wheels(self):
        """make wheels: every wheel make install needs (but a system torch) into WHEELS."""
        self.say(f"mkdir -p {self.args.wheels}")
        if not self.dry:
            os.makedirs(self.args.wheels, exist_ok=True)
        if not self.torch_is_system:
            self.download(*shlex.split(self.args.torch_index), self.args.torch)
        self.build_wheel(*SDIST_ONLY)
        self.fairseq_wheel()
        self.download("--no-deps", *self.meteor, *NEED_TORCH)
        self.build_wheel(self.checkout_copy())
        needs = wheel_needs([path for pattern in ("sparse_attn-*.whl", "entmax-*.whl")
                             for path in sorted(glob.glob(os.path.join(self.args.wheels,
                                                                       pattern)))],
                            PACKAGE_EXTRAS)
        self.download("--find-links", self.args.wheels,
                      "-c", self.scratch_file("no-torch.txt", "torch<0\n"),
                      self.numpy_spec, "cython", "setuptools", "wheel", *FAIRSEQ_NEEDS,
                      "-r", self.scratch_file("needs.txt", "".join(f"{need}\n" for need in needs)),
                      "-r", self.dev_requirements(), *self.tool_specs)

    def fairseq_wheel(self):
        """fairseq-fixed's wheel for that Python and platform (PyPI has cp312), else one
        built here against --python's torch, numpy and cython, for this machine only."""
        if self.download("--no-deps", self.args.fairseq, check=False):
            return
        print("make wheels: building it here", flush=True)
        if self.wheels_python != python_version(self.args.python):
            sys.exit(f"make wheels: no {self.args.fairseq} wheel for Python {self.wheels_python};"
                     f" make one with PYTHON=<a Python {self.wheels_python} with torch, numpy"
                     " and cython>")
        self.build_wheel(self.args.fairseq, options=["--no-build-isolation"])

    def checkout_copy(self):
        """This package's sources: a copy of the checkout's files (setuptools would add stale
        ones from build/), or the folder itself outside git."""
        if not succeeds(["git", "rev-parse", "--is-inside-work-tree"]):
            return "."
        copy = os.path.join(self.scratch, "source")
        if self.dry:
            return copy
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], stdout=subprocess.PIPE, check=True)
        for name in filter(None, os.fsdecode(listed.stdout).split("\0")):
            if os.path.isfile(name) or os.path.islink(name):
                os.makedirs(os.path.dirname(os.path.join(copy, name)), exist_ok=True)
                shutil.copy2(name, os.path.join(copy, name), follow_symlinks=False)
        return copy


def parse_args(argv):
    """The command and the Makefile's settings."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("install", "wheels"))
    for name in ("python", "venv", "torch", "fairseq"):
        parser.add_argument(f"--{name}", required=True)
    for name in ("torch-index", "wheels", "wheels-python", "wheels-platform", "without"):
        parser.add_argument(f"--{name}", default="")
    parser.add_argument("--check", action="store_true",
                        help="print what would stop the command, in one line, and exit")
    parser.add_argument("-n", "--dry-run", action="store_true",
                        help="print the commands, run none")
    parser.add_argument("-s", "--quiet", action="store_true", help="do not echo commands")
    return parser.parse_args(argv)


def main(argv=None):
    """Run (or check) the command, in the checkout's root."""
    args = parse_args(argv)
    os.chdir(ROOT)
    with tempfile.TemporaryDirectory(prefix="sparse-attn-install-") as scratch:
        installer = Installer(args, scratch)
        problem = installer.problem()
        if args.check or problem:
            print(problem, file=sys.stdout if args.check else sys.stderr)
            return 0 if args.check else 1
        getattr(installer, args.command)()
    return 0


if __name__ == "__main__":
    sys.exit(main())
