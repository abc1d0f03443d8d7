"""Output samples written by the worker: contact sheet, GIF, answer text; problems never raise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from tuner.runner.measure.samples import write_samples
from tuner.workloads.base import WorkloadOutput


def test_video_gives_a_contact_sheet_and_a_gif(tmp_path: Path) -> None:
    video = np.zeros((2, 10, 16, 24, 3), dtype=np.uint8)
    for frame in range(10):
        video[:, frame] = frame * 25
    samples = write_samples(WorkloadOutput(video=video), tmp_path)
    assert samples.problems == {}
    sheet = Image.open(samples.files["contact_sheet.png"])
    # 8 of the 10 frames, each enlarged 6x (24 px -> 144 px wide, >= 128), 4 px gaps
    assert sheet.size == (8 * 144 + 7 * 4, 16 * 6)
    first, last = np.asarray(sheet)[0, 0], np.asarray(sheet)[0, -1]
    assert first[0] == 0 and last[0] == 9 * 25, "first and last frames are on the sheet"
    gif = Image.open(samples.files["sample.gif"])
    assert gif.n_frames == 10 and gif.size == (144, 96)


def test_text_gives_the_answer_and_bad_video_is_a_problem_not_an_error(tmp_path: Path) -> None:
    samples = write_samples(WorkloadOutput(video=np.zeros((4, 4), dtype=np.uint8), text=["a cat", "a dog"]), tmp_path)
    assert Path(samples.files["answer.txt"]).read_text() == "a cat\na dog\n"
    assert "video" in samples.problems and "shape" in samples.problems["video"]
    assert "contact_sheet.png" not in samples.files
