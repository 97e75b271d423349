"""tools/install.py's pieces, which ``make install`` and ``make wheels`` run: the platform
tags pip is given, the stamp that says whether the install is current, what a Python with
a torch answers for ``TORCH=system`` and what the venv then holds, WITHOUT's check, and
the needs read from wheels. ``tests/e2e/test_install.py`` drives them through make."""

import importlib.metadata
import importlib.util
import os
import sys
import zipfile

import pytest

from helpers import REPO

SPEC = importlib.util.spec_from_file_location("install_script", REPO / "tools" / "install.py")
install = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(install)

#: What a cluster's Python with a CUDA torch and triton answers (tests/e2e/test_install.py).
ANSWER = "2.11.0+cu130 3.12 3.6.0 /opt/sys/site /opt/sys/site /opt/sys/user"


def test_a_manylinux_platform_brings_every_older_glibc_and_its_legacy_names():
    tags = install.platform_tags("manylinux_2_28_x86_64")
    assert tags[:3] == ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
                        "manylinux_2_26_x86_64"]
    assert tags[23:] == ["manylinux_2_5_x86_64", "manylinux2014_x86_64",
                         "manylinux2010_x86_64", "manylinux1_x86_64"]
    assert len(tags) == len(set(tags)) == 27


def test_legacy_names_come_only_up_to_the_glibc_named_and_other_platforms_stay_alone():
    tags = install.platform_tags("manylinux_2_12_aarch64 macosx_11_0_arm64")
    assert tags == [*(f"manylinux_2_{minor}_aarch64" for minor in range(12, 4, -1)),
                    "manylinux2010_aarch64", "manylinux1_aarch64", "macosx_11_0_arm64"]


def test_the_stamp_holds_the_spec_then_the_parts_left_out_in_order():
    assert install.stamp_text("torch==2.13.0 fairseq-fixed==0.12.3.1", "lint meteor lint") == \
        "torch==2.13.0 fairseq-fixed==0.12.3.1\nwithout: lint meteor\n"
    assert install.stamp_text("torch==2.13.0", "") == "torch==2.13.0\nwithout: \n"


@pytest.fixture
def stamped(tmp_path):
    """An input file, then a stamp written after it: the stamp's path and the input's."""
    source = tmp_path / "setup.py"
    source.write_text("")
    os.utime(source, (1, 1))
    stamp = tmp_path / ".installed"
    stamp.write_text(install.stamp_text("torch==2.13.0", "hf lint"))
    return stamp, source


def test_a_stamp_with_the_same_text_and_no_newer_input_is_current(stamped):
    stamp, source = stamped
    assert install.stamp_is_current(stamp, install.stamp_text("torch==2.13.0", "lint hf"),
                                    [source])
    assert install.stamped_spec(stamp) == "torch==2.13.0"


@pytest.mark.parametrize("spec,without", [("torch==2.8.0", "hf lint"), ("torch==2.13.0", ""),
                                          ("torch==2.13.0 --index-url X", "hf lint")])
def test_another_spec_or_other_parts_left_out_make_the_stamp_out_of_date(stamped, spec,
                                                                         without):
    stamp, source = stamped
    assert not install.stamp_is_current(stamp, install.stamp_text(spec, without), [source])


def test_an_input_newer_than_the_stamp_or_no_stamp_makes_it_out_of_date(stamped, tmp_path):
    stamp, source = stamped
    text = stamp.read_text()
    os.utime(source, (os.stat(stamp).st_mtime + 1,) * 2)
    assert not install.stamp_is_current(stamp, text, [source])
    assert not install.stamp_is_current(tmp_path / "none", text, [])
    assert install.stamped_spec(tmp_path / "none") == ""


def test_a_one_line_stamp_from_before_without_was_recorded_is_out_of_date(tmp_path):
    stamp = tmp_path / ".installed"
    stamp.write_text("torch==2.13.0\n")
    assert not install.stamp_is_current(stamp, install.stamp_text("torch==2.13.0", ""), [])
    assert install.stamped_spec(stamp) == "torch==2.13.0"


def test_the_answer_of_a_python_with_torch_gives_the_venv_its_link_and_pins():
    system = install.parse_probe(ANSWER + "\n")
    assert system == install.SystemTorch("2.11.0+cu130", "3.12", "3.6.0", "/opt/sys/site",
                                         ["/opt/sys/site", "/opt/sys/user"])
    assert install.pth_text(system) == ("import site; site.addsitedir('/opt/sys/site')\n"
                                        "import site; site.addsitedir('/opt/sys/user')\n")
    assert install.pins_text(system) == "torch==2.11.0+cu130\ntriton==3.6.0\n"
    assert install.pins_text(system._replace(triton="none")) == "torch==2.11.0+cu130\n"


def test_a_python_that_prints_nothing_or_cannot_run_has_no_torch(tmp_path):
    assert install.parse_probe("") is None
    assert install.probe_torch(str(tmp_path / "no-python")) is None


def test_this_python_is_found_to_have_its_torch_without_importing_it():
    system = install.probe_torch(sys.executable)
    torch = importlib.util.find_spec("torch")
    assert system.version == importlib.metadata.version("torch")
    assert system.python == "%d.%d" % sys.version_info[:2]
    assert system.folder == os.path.dirname(list(torch.submodule_search_locations)[0])
    assert system.folder in system.sites


def test_without_names_optional_parts_only():
    assert install.without_problem("") == install.without_problem("hf meteor lint") == ""
    assert install.without_problem("meteor fairseq") == \
        "WITHOUT=meteor fairseq: the optional parts are meteor lint hf"


def test_a_system_torch_leaves_the_triton_requirement_out():
    requirements = "# triton comes with CUDA torch\npytest>=8\ntriton>=3.2; os_name\nscipy\n"
    assert install.without_triton(requirements) == \
        "# triton comes with CUDA torch\npytest>=8\nscipy\n"


def a_wheel(folder, name, metadata):
    """A wheel of ``name`` (distribution-version) holding only its METADATA's text."""
    wheel = folder / f"{name}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{name}.dist-info/METADATA", "Metadata-Version: 2.1\n" + metadata)
    return wheel


def test_the_needs_of_wheels_that_need_torch_leave_torch_and_extras_out(tmp_path):
    wheel = a_wheel(tmp_path, "entmax-1.3", (
        "Name: entmax\nRequires-Dist: torch>=1.3\n"
        "Requires-Dist: torchaudio\nRequires-Dist: numpy>=1.24\n"
        "Requires-Dist: entmax>=1.3\nRequires-Dist: pytest ; extra == 'test'\n\n"
        "Requires-Dist: in the description\n"))
    assert install.wheel_needs([wheel]) == ["torchaudio", "numpy>=1.24"]


def test_the_needs_of_the_extras_named_come_with_the_wheel_s_own(tmp_path):
    """make wheels downloads what the package's extras need (read from its wheel), as
    make install installs it with them."""
    wheel = a_wheel(tmp_path, "sparse_attn-0.1.0", (
        "Name: sparse-attn\nRequires-Dist: torch>=1.13\n"
        "Requires-Dist: numpy>=1.24\nRequires-Dist: sacrebleu>=2.3; extra == \"metrics\"\n"
        "Requires-Dist: matplotlib>=3.8; extra == 'plots'\n"
        "Requires-Dist: transformers<6,>=5.24; extra == \"hf\"\n"
        "Requires-Dist: triton>=3.2; (platform_system == \"Linux\") and extra == \"test\"\n"))
    assert install.wheel_needs([wheel], ("metrics", "plots", "test")) == \
        ["numpy>=1.24", "sacrebleu>=2.3", "matplotlib>=3.8", "triton>=3.2; (platform_system "
                                                             "== \"Linux\")"]
    assert install.PACKAGE_EXTRAS == ("data", "fairseq", "metrics", "plots")
