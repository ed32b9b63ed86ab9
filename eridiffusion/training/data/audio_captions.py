"""The captions of audio files, in ACE-Step 1.5's dataset layout: tags (style, genre, instruments) as the
caption, lyrics in `<name>.lyrics.txt`, and bpm, key, time signature and language in `<name>.json`,
read into the keywords the host's TextEncodeAceStepAudio1.5 node gives the text encoder."""

import json
import os
from dataclasses import dataclass

from ...errors import EriDiffusionError

LYRICS_SUFFIX = ".lyrics.txt"
CAPTION_SUFFIX = ".caption.txt"  # ACE-Step 1.5's caption file, beside ours (<name><caption_ext>)
METADATA_SUFFIX = ".json"
SIDECAR_SUFFIXES = (LYRICS_SUFFIX, CAPTION_SUFFIX, METADATA_SUFFIX)
INSTRUMENTAL = "[Instrumental]"  # ACE-Step's lyrics for a track without vocals
TIME_SIGNATURES = ("2", "3", "4", "6")  # TextEncodeAceStepAudio1.5's choices
KEY_ROOTS = ("C", "C#", "Db", "D", "D#", "Eb", "E", "F", "F#", "Gb", "G", "G#", "Ab", "A", "A#", "Bb", "B")
# Other names for the fields read (other tools' annotation files): under them a field would not be read.
FIELD_ALIASES = {
    "tags": "caption",
    "prompt": "caption",
    "lyric": "lyrics",
    "tempo": "bpm",
    "key": "keyscale",
    "key_scale": "keyscale",
    "scale": "keyscale",
    "time_signature": "timesignature",
    "timesig": "timesignature",
    "vocal_language": "language",
    "lang": "language",
}
EXAMPLE = '{"caption": "lofi hip hop, mellow piano", "bpm": 84, "keyscale": "A minor", "timesignature": "4"}'


@dataclass(frozen=True)
class AudioPrompt:
    """What an audio file's caption says besides its tags: lyrics and the music's metadata (None or ""
    where not given: the text encoder then leaves it out, as for an unset field of the node)."""

    lyrics: str = INSTRUMENTAL
    bpm: int | None = None
    keyscale: str = ""
    timesignature: str = ""
    language: str = "en"

    def text_keywords(self, seconds):
        """The keywords TextEncodeAceStepAudio1.5 passes to `clip.tokenize` beside the tags, for a clip
        of `seconds`, without the LM's audio codes (ACE-Step trains its DiT without them)."""
        keywords = {"lyrics": self.lyrics, "duration": float(seconds), "language": self.language}
        keywords.update(generate_audio_codes=False)
        if self.bpm is not None:
            keywords["bpm"] = self.bpm
        if self.timesignature:
            keywords["timesignature"] = int(self.timesignature)
        if self.keyscale:
            keywords["keyscale"] = self.keyscale
        return keywords

    def fingerprint(self):
        return json.dumps([self.lyrics, self.bpm, self.keyscale, self.timesignature, self.language])


def audio_caption(folder, name, caption, sidecars):
    """(caption, AudioPrompt) of the audio file `name` of `folder`: `caption` (its <name><caption_ext>
    file's text, or None) or else its <name>.caption.txt or its JSON's "caption"; more than one of them is
    an error naming the files. `sidecars` are the folder's sidecar file names."""
    stem = os.path.splitext(name)[0]
    metadata = _metadata(os.path.join(folder, stem + METADATA_SUFFIX)) if stem + METADATA_SUFFIX in sidecars else {}
    given = {}
    if caption is not None:
        given["its caption file"] = caption
    if stem + CAPTION_SUFFIX in sidecars:
        given[stem + CAPTION_SUFFIX] = _text(os.path.join(folder, stem + CAPTION_SUFFIX))
    if metadata.get("caption"):
        given[stem + METADATA_SUFFIX + "'s caption"] = metadata["caption"]
    if len(given) > 1:
        raise EriDiffusionError(
            f"{os.path.join(folder, name)} has more than one caption ({', '.join(given)}); keep one of them."
        )
    lyrics = _text(os.path.join(folder, stem + LYRICS_SUFFIX)) if stem + LYRICS_SUFFIX in sidecars else ""
    lyrics = lyrics or metadata.get("lyrics", "") or INSTRUMENTAL
    prompt = AudioPrompt(
        lyrics=lyrics,
        bpm=metadata.get("bpm"),
        keyscale=metadata.get("keyscale", ""),
        timesignature=metadata.get("timesignature", ""),
        language=metadata.get("language", "en"),
    )
    return next(iter(given.values()), None), prompt


def _text(path):
    try:
        with open(path, encoding="utf-8-sig") as file:
            return file.read().strip()
    except UnicodeDecodeError:
        raise EriDiffusionError(f"{path} is not UTF-8 text; re-save it as UTF-8.") from None


def _metadata(path):
    """The checked fields of an ACE-Step 1.5 annotation file (caption, lyrics, bpm, keyscale,
    timesignature, language); anything malformed is an error naming the file and the field."""
    try:
        entry = json.loads(_text(path) or "{}")
    except json.JSONDecodeError as error:
        raise EriDiffusionError(
            f"{path} is not valid JSON ({error.msg}); write one object such as {EXAMPLE}."
        ) from None
    if not isinstance(entry, dict):
        raise EriDiffusionError(f"{path} is not a JSON object; write one such as {EXAMPLE}.")
    misnamed = sorted(key for key in entry if key in FIELD_ALIASES)
    if misnamed:
        key = misnamed[0]
        raise EriDiffusionError(
            f'{path}: "{key}" is not read; ACE-Step 1.5\'s annotation calls it "{FIELD_ALIASES[key]}": rename it.'
        )
    out = {}
    for key in ("caption", "lyrics", "language"):
        if key in entry:
            if not isinstance(entry[key], str):
                raise EriDiffusionError(f'{path}: "{key}" must be text, got {entry[key]!r}; write it as a JSON string.')
            out[key] = entry[key].strip()
    if "bpm" in entry:
        bpm = entry["bpm"]
        if isinstance(bpm, bool) or not isinstance(bpm, (int, float)) or not 10 <= bpm <= 300:
            raise EriDiffusionError(f'{path}: "bpm" {bpm!r} must be a number of beats per minute from 10 to 300.')
        out["bpm"] = round(bpm)
    if "timesignature" in entry:
        signature = str(entry["timesignature"]).removesuffix("/4")
        if signature not in TIME_SIGNATURES:
            raise EriDiffusionError(
                f'{path}: "timesignature" {entry["timesignature"]!r} is not one of {", ".join(TIME_SIGNATURES)} '
                '(beats per bar, as ACE-Step writes it: "4" for 4/4).'
            )
        out["timesignature"] = signature
    if "keyscale" in entry:
        out["keyscale"] = _keyscale(path, entry["keyscale"])
    return out


def _keyscale(path, value):
    parts = value.split() if isinstance(value, str) else []
    if len(parts) != 2 or parts[0] not in KEY_ROOTS or parts[1] not in ("major", "minor"):
        raise EriDiffusionError(
            f'{path}: "keyscale" {value!r} is not a key such as "C major" or "F# minor" (a root of '
            f"{' '.join(KEY_ROOTS)} and major or minor)."
        )
    return value
