# %% [markdown]
# # A system of your own, from Python
#
# The worked example of docs/api.md, cell by cell: the pitch-shift stage of `pitch_shift.py` (beside this file) as a
# system, on one waveform, over a corpus with two workers, killed and resumed, then evaluated.
# Run it whole with `python examples/walkthrough.py [WORK_FOLDER]`, or cell by cell in an editor that knows `# %%`.

# %%
import subprocess
import sys
import time
from pathlib import Path

import soundfile

import voxanon
from voxanon.data_prep.demo_corpus import demo_corpus_dir

HERE = Path(__file__).resolve().parent
WORK = Path(sys.argv[1] if len(sys.argv) > 1 else "walkthrough")
RECIPE = HERE / "pitch.yaml"           # names pitch_shift:PitchShift, imported from beside the recipe
corpus = voxanon.Corpus.read(demo_corpus_dir())
print(f"{len(corpus.utterances)} utterances of {len(corpus.speakers)} speakers")

# %% [markdown]
# ## One waveform
# The same seeds as a batch run: this is the file `voxanon anonymise` writes for the utterance, sample for sample.

# %%
system = voxanon.load_system(RECIPE)
utt = corpus.utterances[0]
audio, rate = soundfile.read(corpus.audio_path(utt), dtype="float32")
shifted, rate = system(audio, rate, utt_id=utt, speaker=corpus.utt2spk[utt])
print(system, f"{utt}: {len(audio)} samples in, {len(shifted)} out at {rate} Hz")

# %% [markdown]
# ## The corpus, with two workers, killed half-way and resumed
# The command runs in its own process, so that killing it is a real crash (`kill -9`); the second run, from Python,
# finds what the first one finished in the output's journal and does only the rest.

# %%
command = [sys.executable, "-m", "voxanon.pipeline.cli", "anonymise", "--system", str(RECIPE), "--data",
           str(corpus.path), "--out", str(WORK / "anon"), "--suffix", "_pitch", "--workers", "2", "--quiet"]
first = subprocess.Popen(command, stderr=subprocess.DEVNULL)
journal = WORK / "anon" / f"{corpus.name}_pitch" / ".journal.jsonl"
while first.poll() is None and not (journal.is_file() and journal.stat().st_size):
    time.sleep(0.05)
first.kill()
first.wait()
run = voxanon.anonymise(corpus, RECIPE, WORK / "anon" / f"{corpus.name}_pitch", workers=2)
print(f"{run.total} utterances: {run.resumed} resumed from the killed run, {run.processed} processed now, "
      f"{len(run.failures)} failed")

# %% [markdown]
# ## Evaluation
# The ASV figures of the VoicePrivacy protocol (without the ASR, which needs its model), as a mapping and a table.

# %%
evaluation = voxanon.evaluate(corpus.path, run.out_dir, out=WORK / "evaluation", settings=["asr=null"])
print(evaluation.table())
print("EER o-a (ROCCH):", evaluation.figures[corpus.name, "o-a", "eer", "rocch", "ignorant"])
print("report:", evaluation.report)
