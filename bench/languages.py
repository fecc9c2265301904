"""Languages: the multilingual base model through recall, side by side with faster-whisper.

    .venv/bin/python -m bench.languages               # about 10 minutes on two cores
    .venv/bin/python -m bench.run --only languages    # the same, into docs/benchmarks.md

Speech made with espeak-ng (`recall_dev.speech.synthesize_voices`) with known text: `FILES`
files a language (2), each two sentences (about 8 s; the four sentences once over), in German,
Spanish, Italian, Finnish, Polish, Hungarian and English (`LANGUAGES`), and in French,
Portuguese and Russian apart (`HARD`: espeak-ng's voices for them are not what Whisper base
learned those languages from, see the results). And files
that switch language at known times (`SWITCHES`, four sentences each, 1 s between them). The
model is the packaged base model (`recall.engines.models.BASE`), int8 on this CPU, beam 2.

`measure()` returns, per language: `bare_id` / `recall_id` (share of files whose language was
identified right, from all of Whisper's languages; faster-whisper's `WhisperModel.transcribe`
with the VAD filter, and a job with `language: auto` through the real worker loop, its
`status.result.language`), `recall_options_id` (for the `HARD` languages: the same with
`languageOptions` the seven languages and the hard one), `bare_wer` / `recall_wer` (word error
rate against the text spoken, each in the language it identified; words lower-cased,
punctuation removed), `bare_translation` / `recall_translation` (the share of the English
reference's content words found in the translation: faster-whisper's translate task, and
`transcript.translate: en`). For the switching files: `segment_accuracy`, the share of the
speech time whose segment carries the language spoken (`languageScope: segment`,
`languageOptions` the seven).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import unicodedata
from pathlib import Path
from typing import Any

# The same four sentences in each language; ENGLISH is the reference translation.
ENGLISH = [
    "The city council met on Tuesday evening to talk about the new budget.",
    "My grandmother bakes fresh bread every morning for the whole family.",
    "If the weather stays dry, the farmers will start the harvest next week.",
    "The library opens early in the morning and closes late in the evening.",
]
LANGUAGES: dict[str, list[str]] = {
    "de": [
        "Der Stadtrat traf sich am Dienstagabend, um über den neuen Haushalt zu sprechen.",
        "Meine Großmutter backt jeden Morgen frisches Brot für die ganze Familie.",
        "Wenn das Wetter trocken bleibt, beginnen die Bauern nächste Woche mit der Ernte.",
        "Die Bibliothek öffnet früh am Morgen und schließt spät am Abend.",
    ],
    "es": [
        "El ayuntamiento se reunió el martes por la tarde para hablar del nuevo presupuesto.",
        "Mi abuela hornea pan fresco cada mañana para toda la familia.",
        "Si el tiempo sigue seco, los agricultores empezarán la cosecha la próxima semana.",
        "La biblioteca abre temprano por la mañana y cierra tarde por la noche.",
    ],
    "it": [
        "Il consiglio comunale si è riunito martedì sera per parlare del nuovo bilancio.",
        "Mia nonna prepara il pane fresco ogni mattina per tutta la famiglia.",
        "Se il tempo resta asciutto, i contadini cominceranno il raccolto la prossima settimana.",
        "La biblioteca apre presto la mattina e chiude tardi la sera.",
    ],
    "fi": [
        "Kaupunginvaltuusto kokoontui tiistai-iltana keskustelemaan uudesta talousarviosta.",
        "Isoäitini leipoo joka aamu tuoretta leipää koko perheelle.",
        "Jos sää pysyy kuivana, maanviljelijät aloittavat sadonkorjuun ensi viikolla.",
        "Kirjasto aukeaa aikaisin aamulla ja sulkeutuu myöhään illalla.",
    ],
    "pl": [
        "Rada miejska spotkała się we wtorek wieczorem, aby omówić nowy budżet.",
        "Moja babcia codziennie rano piecze świeży chleb dla całej rodziny.",
        "Jeśli pogoda będzie sucha, rolnicy zaczną żniwa w przyszłym tygodniu.",
        "Biblioteka otwiera się wcześnie rano i zamyka późno wieczorem.",
    ],
    "hu": [
        "A városi tanács kedd este ülésezett, hogy megvitassa az új költségvetést.",
        "A nagymamám minden reggel friss kenyeret süt az egész családnak.",
        "Ha az idő száraz marad, a gazdák jövő héten kezdik az aratást.",
        "A könyvtár korán reggel nyit és késő este zár.",
    ],
    "en": ENGLISH,
}
HARD: dict[str, list[str]] = {
    "fr": [
        "Le conseil municipal s'est réuni mardi soir pour parler du nouveau budget.",
        "Ma grand-mère fait du pain frais chaque matin pour toute la famille.",
        "Si le temps reste sec, les agriculteurs commenceront la récolte la semaine prochaine.",
        "La bibliothèque ouvre tôt le matin et ferme tard le soir.",
    ],
    "pt": [
        "A câmara municipal reuniu-se na terça-feira à noite para falar do novo orçamento.",
        "A minha avó faz pão fresco todas as manhãs para toda a família.",
        "Se o tempo continuar seco, os agricultores começam a colheita na próxima semana.",
        "A biblioteca abre cedo de manhã e fecha tarde à noite.",
    ],
    "ru": [
        "Городской совет собрался во вторник вечером, чтобы обсудить новый бюджет.",
        "Моя бабушка каждое утро печёт свежий хлеб для всей семьи.",
        "Если погода останется сухой, фермеры начнут уборку урожая на следующей неделе.",
        "Библиотека открывается рано утром и закрывается поздно вечером.",
    ],
}
OPTIONS = list(LANGUAGES)
# Files that switch language: (language, sentence) in order, 1 s between sentences.
SWITCHES: list[list[tuple[str, int]]] = [
    [("de", 0), ("es", 1), ("de", 2), ("es", 3)],
    [("it", 0), ("fi", 1), ("pl", 2), ("en", 3)],
    [("pl", 1), ("de", 3), ("it", 2), ("es", 0)],
]
STOPWORDS = frozenset(
    {"the", "a", "an", "to", "of", "on", "in", "at", "for", "and", "or", "if", "will", "is"}
    | {"are", "was", "be", "by", "with", "from", "about", "every", "whole", "it", "its", "this"}
)
BEAM = 2
FILES = 2  # files a language, each two of its four sentences


def normalise(text: str) -> str:
    """Lower case, punctuation removed, single spaces, in any script."""
    kept = "".join(
        " " if unicodedata.category(c).startswith(("P", "S")) else c for c in text.casefold()
    )
    return " ".join(kept.split())


def content_words(text: str) -> set[str]:
    return {w for w in normalise(text).split() if w not in STOPWORDS}


def recall_of(reference: str, translation: str) -> float:
    """The share of `reference`'s content words found in `translation`."""
    words = content_words(reference)
    return len(words & content_words(translation)) / max(1, len(words))


def wer(reference: str, hypothesis: str) -> float:
    import jiwer

    return float(jiwer.wer(normalise(reference), normalise(hypothesis) or "-"))


# --- the audio ------------------------------------------------------------------------------


def files(workdir: Path) -> list[dict[str, Any]]:
    """Four files a language (sentences k and k+1), and the switching files."""
    from recall_dev.speech import synthesize_voices

    out: list[dict[str, Any]] = []
    for language, sentences in {**LANGUAGES, **HARD}.items():
        for k in range(FILES):
            pair = [2 * k % 4, (2 * k + 1) % 4]
            path = workdir / f"{language}-{k}.wav"
            synthesize_voices([(language, sentences[i]) for i in pair], path)
            out.append(
                {
                    "name": path.stem,
                    "path": str(path),
                    "language": language,
                    "hard": language in HARD,
                    "text": " ".join(sentences[i] for i in pair),
                    "english": " ".join(ENGLISH[i] for i in pair),
                }
            )
    for n, switch in enumerate(SWITCHES):
        path = workdir / f"switch-{n}.wav"
        spans = synthesize_voices([(lang, LANGUAGES[lang][i]) for lang, i in switch], path)
        out.append(
            {
                "name": path.stem,
                "path": str(path),
                "switch": [[lang, a, b] for (lang, _), (a, b) in zip(switch, spans, strict=True)],
            }
        )
    return out


# --- the runs -------------------------------------------------------------------------------


def base_model(threads: int) -> Any:
    from recall.base.settings import default_model_cache_dir
    from recall.engines.models import BASE, ModelCache
    from recall.engines.whisper import load_model
    from recall.engines.whisper.model import CPU

    local = ModelCache(default_model_cache_dir(), None).packaged(BASE)
    return load_model(str(local.path), threads, CPU)


def bare(model: Any, item: dict[str, Any]) -> dict[str, Any]:
    """faster-whisper run directly: `WhisperModel.transcribe` (language detected, the VAD
    filter), then its translate task."""
    segments, info = model.transcribe(item["path"], beam_size=BEAM, vad_filter=True)
    text = " ".join(s.text.strip() for s in segments)
    english: Any = []
    if item["language"] != "en":
        english, _ = model.transcribe(
            item["path"], beam_size=BEAM, vad_filter=True, task="translate"
        )
    return {
        "language": info.language,
        "probability": round(float(info.language_probability), 3),
        "text": text,
        "translation": " ".join(s.text.strip() for s in english),
    }


def through_recall(items: list[dict[str, Any]], threads: int) -> dict[str, dict[str, Any]]:
    """One job per file and kind through the real worker loop (an in-memory API server and
    results store): language auto with translation, language auto among the options, and
    segment scope for the switching files."""
    from structlog.testing import capture_logs

    from recall.base.settings import StoreSettings, WorkerSettings
    from recall.bucket import Stores
    from recall.engines.whisper import WhisperEngine
    from recall.media import MediaOptions
    from recall.transcripts import load_transcript
    from recall.worker.loop import Worker
    from recall_dev.twin.api import MemoryApi

    engine = WhisperEngine(threads=threads, media=MediaOptions())
    store = MemoryApi(watch_seconds=1.0)
    jobs: dict[str, dict[str, Any]] = {}
    for item in items:
        base = {
            "source": {"url": Path(item["path"]).as_uri()},
            "leaseDurationSeconds": 600,
            "engine": {"name": "whisper", "model": "base"},
            "transcript": {"translate": "en"},
        }
        if "switch" in item:
            jobs[f"{item['name']}-segment"] = {
                **base,
                "language": "auto",
                "languageScope": "segment",
                "languageOptions": OPTIONS,
            }
        else:
            auto = {**base, "language": "auto"}
            if item["language"] == "en":
                auto.pop("transcript")
            jobs[f"{item['name']}-auto"] = auto
            if item["hard"]:
                jobs[f"{item['name']}-options"] = {
                    "source": base["source"],
                    "leaseDurationSeconds": 600,
                    "engine": base["engine"],
                    "language": "auto",
                    "languageOptions": [*OPTIONS, item["language"]],
                }
    for name, spec in jobs.items():
        store.create_job(
            "default",
            {
                "apiVersion": "recall.dev/v1alpha1",
                "kind": "TranscriptionJob",
                "metadata": {"name": name},
                "spec": spec,
            },
        )
    settings = WorkerSettings(
        id="bench",
        engine="whisper",
        idle_exit_seconds=1.0,
        max_jobs=len(jobs),
        dispatch="queue",
    )
    results = Stores(StoreSettings(url="memory://bench")).results()
    worker = Worker(store, settings, engine, namespace="default", results=results)
    started = time.perf_counter()
    with capture_logs():
        worker.run()
    out: dict[str, dict[str, Any]] = {}
    for name in jobs:
        job = store.get_job("default", name)
        assert job is not None and job.status.result is not None, (name, store.dump())
        transcript = load_transcript(results, job.status.result.transcript)
        assert transcript is not None
        out[name] = {
            "language": job.status.result.language,
            "probability": job.status.result.language_probability,
            "text": transcript.text,
            "translation": " ".join(s.translation or "" for s in transcript.segments).strip(),
            "segments": [[s.start, s.end, s.language] for s in transcript.segments],
            "uncertain": any(c.type == "LanguageUncertain" for c in job.status.conditions),
        }
    store.close()
    out["_"] = {"wall": round(time.perf_counter() - started, 1)}
    return out


# --- the figures ----------------------------------------------------------------------------


def overlaps(switch: list[list[Any]], segments: list[list[Any]]) -> tuple[float, float]:
    """(seconds of segments over the spoken sentences in the language spoken, all of them)."""
    right = total = 0.0
    for language, a, b in switch:
        for start, end, said in segments:
            overlap = max(0.0, min(b, end) - max(a, start))
            total += overlap
            right += overlap if said == language else 0.0
    return right, total


def segment_accuracy(switch: list[list[Any]], segments: list[list[Any]]) -> float:
    """The share of the transcribed speech time (segments over the spoken sentences) whose
    segments carry the language spoken."""
    right, total = overlaps(switch, segments)
    return right / total if total else 0.0


def measure(threads: int = 0) -> dict[str, Any]:
    from recall.engines.whisper import available_cpus

    threads = threads or available_cpus()
    with tempfile.TemporaryDirectory(prefix="recall-bench-languages-") as tmp:
        items = files(Path(tmp))
        model = base_model(threads)
        started = time.perf_counter()
        bares = {}
        for i in items:
            if "switch" not in i:
                bares[i["name"]] = bare(model, i)
                print(f"[languages] bare {i['name']}: {bares[i['name']]}", file=sys.stderr)
        bare_wall = round(time.perf_counter() - started, 1)
        mine = through_recall(items, threads)
    out: dict[str, Any] = {"threads": threads, "bare_wall_seconds": bare_wall}
    out["recall_wall_seconds"] = mine["_"]["wall"]
    per: dict[str, dict[str, Any]] = {}
    for language in [*LANGUAGES, *HARD]:
        mine_items = [i for i in items if i.get("language") == language]
        row: dict[str, Any] = {"files": len(mine_items), "hard": language in HARD}
        b = [bares[i["name"]] for i in mine_items]
        r = [mine[f"{i['name']}-auto"] for i in mine_items]
        row["bare_id"] = sum(x["language"] == language for x in b) / len(b)
        row["recall_id"] = sum(x["language"] == language for x in r) / len(r)
        row["bare_wer"] = round(
            sum(wer(i["text"], x["text"]) for i, x in zip(mine_items, b, strict=True)) / len(b), 3
        )
        row["recall_wer"] = round(
            sum(wer(i["text"], x["text"]) for i, x in zip(mine_items, r, strict=True)) / len(r), 3
        )
        row["detected"] = sorted({str(x["language"]) for x in r})
        if language != "en":
            row["bare_translation"] = round(
                sum(
                    recall_of(i["english"], x["translation"])
                    for i, x in zip(mine_items, b, strict=True)
                )
                / len(b),
                3,
            )
            row["recall_translation"] = round(
                sum(
                    recall_of(i["english"], x["translation"])
                    for i, x in zip(mine_items, r, strict=True)
                )
                / len(r),
                3,
            )
        if language in HARD:
            o = [mine[f"{i['name']}-options"] for i in mine_items]
            row["recall_options_id"] = sum(x["language"] == language for x in o) / len(o)
            row["uncertain"] = sum(bool(x["uncertain"]) for x in o)
        per[language] = row
    out["languages"] = per
    switches = []
    for item in items:
        if "switch" in item:
            got = mine[f"{item['name']}-segment"]
            switches.append(
                {
                    "file": item["name"],
                    "spoken": [s[0] for s in item["switch"]],
                    "found": [s[2] for s in got["segments"]],
                    "accuracy": round(segment_accuracy(item["switch"], got["segments"]), 3),
                    "majority": got["language"],
                }
            )
    out["switches"] = switches
    pairs = [
        overlaps(i["switch"], mine[f"{i['name']}-segment"]["segments"])
        for i in items
        if "switch" in i
    ]
    right, total = sum(r for r, _ in pairs), sum(t for _, t in pairs)
    out["segment_accuracy"] = round(right / total, 3) if total else None
    return out


def markdown(section: dict[str, Any]) -> list[str]:
    """The languages section of docs/benchmarks.md."""
    s = section
    lines = [
        "## Languages: the multilingual base model side by side with faster-whisper",
        "",
        f"espeak-ng speech with known text ({FILES} files of two sentences a language), the "
        "packaged base model (int8, beam 2, "
        f"{s['threads']} threads): faster-whisper's `WhisperModel.transcribe` run directly, "
        "and a job through the real worker loop (`language: auto`). ID: the share of files "
        "whose language was identified right among "
        "all of Whisper's; WER against the text spoken; translation: the share of the English "
        "reference's content words found (faster-whisper's translate task against "
        "`transcript.translate: en`). Languages in *italics*: espeak-ng's voice is not "
        "identified by the base model (docs/languages.md); for them a second job chooses among "
        "`languageOptions` (the seven and the language itself).",
        "",
        "| language | ID bare | ID recall | ID recall, options | WER bare | WER recall "
        "| translation bare | translation recall | detected |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for language, r in s["languages"].items():
        name = f"*{language}*" if r["hard"] else language
        lines.append(
            f"| {name} | {r['bare_id']:.0%} | {r['recall_id']:.0%} | "
            f"{_pct(r.get('recall_options_id'))} | {r['bare_wer']} | {r['recall_wer']} | "
            f"{_pct(r.get('bare_translation'))} | {_pct(r.get('recall_translation'))} | "
            f"{', '.join(r['detected'])} |"
        )
    lines += [
        "",
        f"Files that switch language (`languageScope: segment`): {_pct(s['segment_accuracy'])} "
        "of the speech time in segments of the language spoken.",
        "",
        "| file | spoken | segments' languages | right (speech time) | majority |",
        "| --- | --- | --- | --- | --- |",
    ]
    for w in s["switches"]:
        lines.append(
            f"| {w['file']} | {' '.join(w['spoken'])} | {' '.join(map(str, w['found']))} | "
            f"{w['accuracy']:.0%} | {w['majority']} |"
        )
    lines.append("")
    return lines


def _pct(value: Any) -> str:
    return "—" if value is None else f"{float(value):.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    result = measure(args.threads)
    print(json.dumps(result, indent=2, ensure_ascii=False))
    print("\n".join(markdown(result)))


if __name__ == "__main__":
    main()
