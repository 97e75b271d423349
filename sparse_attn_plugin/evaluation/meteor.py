"""METEOR through the Meteor 1.5 jar, one Java process for a whole corpus.

Meteor 1.5 (Denkowski & Lavie 2014): hypothesis words matched to reference words by type i
(exact, stem, synonym, paraphrase) with weight w_i, content (c) and function (f) words
balanced by delta::

    P = sum_i w_i (delta m_i(h_c) + (1 - delta) m_i(h_f)) / (delta |h_c| + (1 - delta) |h_f|)
    R = the same over the reference words,   Fmean = P R / (alpha P + (1 - alpha) R)
    METEOR = (1 - gamma (chunks / matches) ** beta) Fmean   (no penalty for a single chunk)

The corpus score is the jar's "Final score" over the added sentence statistics, x100; the
presets (:data:`LANGUAGE_PRESETS`) and the jar's parameters: docs/scoring.md, "METEOR".
"""

import importlib.util
import re
import shutil
import subprocess
import threading
from collections import deque
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import List, Optional, Sequence

from tqdm import tqdm

from .metric import Inputs, Metric, Report, Resource, Setting

JAVA_MISSING = "METEOR needs Java: install a JRE (e.g. apt-get install default-jre-headless)"
JAR_MISSING = "Meteor 1.5 jar not found: pip install --no-deps pycocoevalcap==1.2"
LANGUAGE_PRESETS = {
    "en": ("-l", "en", "-norm"),
    "de": ("-l", "de", "-norm", "-m", "exact stem", "-w", "1.0 0.8"),
    "other": ("-l", "other", "-lower"),
}


@dataclass(frozen=True)
class MeteorResult:
    corpus: float  # 0-100, from the added statistics (the jar's "Final score" x100)
    sentences: List[float]  # 0-100, one per pair
    language: str = "en"  # the preset scored with


def _unknown(language) -> str:
    presets = "; ".join(f"{k}: {' '.join(v)}" for k, v in LANGUAGE_PRESETS.items())
    return f"unknown METEOR language {language!r}; presets are {presets}"


def find_meteor_jar() -> Path:
    """The Meteor 1.5 jar inside the installed pycocoevalcap package (not imported)."""
    spec = importlib.util.find_spec("pycocoevalcap")
    for root in (spec.submodule_search_locations or []) if spec else []:
        jar = Path(root) / "meteor" / "meteor-1.5.jar"
        if jar.is_file():
            return jar
    raise FileNotFoundError(JAR_MISSING)


def _clean(text: str) -> str:
    return re.sub(r"[\r\n]+", " ", text).replace("|||", "| | |")


def _collect(stream, lines: deque) -> None:
    for line in stream:
        lines.append(line.rstrip())


class Meteor:
    """One ``java -jar meteor-1.5.jar - - -stdio`` process; use as a context manager."""

    def __init__(self, language: str = "en", jar: Optional[Path] = None, memory: str = "2G"):
        if language not in LANGUAGE_PRESETS:
            raise ValueError(_unknown(language))
        java = shutil.which("java")
        if java is None:
            raise RuntimeError(JAVA_MISSING)
        jar = Path(jar) if jar is not None else find_meteor_jar()
        command = [java, f"-Xmx{memory}", "-jar", str(jar), "-", "-", "-stdio"]
        self.language = language
        self._lock = threading.Lock()
        self._stderr: deque = deque(maxlen=100)
        self._proc = subprocess.Popen(
            command + list(LANGUAGE_PRESETS[language]), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8", errors="replace")
        # The thread must not hold ``self``, or ``__del__`` would never run.
        self._drain = threading.Thread(target=_collect, args=(self._proc.stderr, self._stderr),
                                       daemon=True)
        self._drain.start()

    def score(self, hypotheses: Sequence[str], references: Sequence[str],
              progress: bool = False) -> MeteorResult:
        """Sentence and corpus METEOR (0-100) of ``hypotheses`` against one reference each;
        ``progress`` shows a bar over the sentences."""
        if len(hypotheses) != len(references):
            raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
        if not hypotheses:
            raise ValueError("no sentences to score")
        # The jar's -stdio protocol: "SCORE ||| ref ||| hyp" answers one line of statistics;
        # "EVAL ||| s_1 ||| ... ||| s_k" answers the k sentence scores, then the score of the
        # added statistics (two equal lines for k = 1): two round trips per call.
        lines = [f"SCORE ||| {_clean(r)} ||| {_clean(h)}\n" for h, r in zip(hypotheses, references)]
        with self._lock:
            stats = self._exchange("".join(lines), len(lines), progress)
            scores = [float(x) for x in self._exchange(f"EVAL ||| {' ||| '.join(stats)}\n",
                                                       len(stats) + 1)]
        return MeteorResult(100 * scores[-1], [100 * s for s in scores[:-1]], self.language)

    def _exchange(self, text: str, n_answers: int, progress: bool = False) -> List[str]:
        """Writes ``text`` from a second thread while reading ``n_answers`` lines, so neither
        side blocks on a full pipe."""
        writer = threading.Thread(target=self._write, args=(text,), daemon=True)
        writer.start()
        answers = [self._read_line() for _ in tqdm(range(n_answers), desc="METEOR",
                                                   unit="sent", disable=not progress)]
        writer.join()
        return answers

    def _write(self, text: str) -> None:
        try:
            self._proc.stdin.write(text)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # the reader sees the end of stdout and reports the jar's error

    def _read_line(self) -> str:
        line = self._proc.stdout.readline()
        if not line:
            raise self._died()
        if not re.fullmatch(r"[0-9.eE+\-\s]+", line):  # e.g. "Error: specify hypothesis ..."
            raise RuntimeError(f"Meteor answered: {line.strip()}")
        return line.strip()

    def _died(self) -> RuntimeError:
        try:
            code = self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        self._drain.join(timeout=5)
        # The last line that is not a Java stack frame ("\tat ...") names the error.
        messages = [line for line in self._stderr if line.strip() and not line[:1].isspace()]
        last = messages[-1] if messages else "no message on stderr"
        return RuntimeError(f"Meteor (java) stopped, exit code {code}: {last}")

    def close(self) -> None:
        """Ends the Java process (also on ``__exit__`` and garbage collection)."""
        proc = getattr(self, "_proc", None)
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.stdin.close()
        except OSError:
            pass
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> "Meteor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


# -- the metric's entry (:data:`.scoring.METRICS`) --------------------------------------------
def _language(setting: Setting, options: dict) -> str:
    """The preset: the options' ``language``, else the target language's (``other``
    where Meteor 1.5 has none)."""
    if options.get("language"):
        return options["language"]
    return setting.language if setting.language in LANGUAGE_PRESETS else "other"


def _check(setting: Setting, options: dict) -> Optional[str]:
    """Why Meteor cannot run here (the preset, Java, the jar), or None."""
    language = _language(setting, options)
    if language not in LANGUAGE_PRESETS:
        return _unknown(language)
    if shutil.which("java") is None:
        return JAVA_MISSING
    try:
        find_meteor_jar()
    except FileNotFoundError as err:
        return str(err)
    return None


def _check_options(options: dict, where: str) -> Optional[str]:
    if options.get("language") not in LANGUAGE_PRESETS:
        return (f"`{where}.language` must be one of {', '.join(LANGUAGE_PRESETS)}, not "
                f"{options.get('language')!r}")
    return None


def _note(report: Report) -> str:
    presets = report.by_corpus(
        lambda options: f"`{' '.join(LANGUAGE_PRESETS[options['language']])}`")
    return f"METEOR: Meteor 1.5 {presets} (0-100, from the corpus's summed statistics)."


def _score(inputs: Inputs) -> MeteorResult:
    return inputs.resource.score(inputs.hypotheses, inputs.references, progress=inputs.progress)


METEOR = Metric(
    "METEOR", "meteor", True, _score, value=attrgetter("corpus"),
    sentences=attrgetter("sentences"), details=lambda result: {"language": result.language},
    resource=Resource(make=lambda setting, options: Meteor(_language(setting, options)),
                      check=_check, close=Meteor.close),
    defaults={"language": None}, check_options=_check_options,
    required=f'{{"language": "{"|".join(LANGUAGE_PRESETS)}"}} for the target language',
    arguments=(("--lang", "language", {"default": "en",
                                       "help": "METEOR language preset: en, de or other"}),),
    summary="Meteor 1.5", note=_note, indexed=False)
