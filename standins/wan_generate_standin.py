"""STAND-IN for Wan2.2's ``generate.py`` (SIMULATED, no model).

Accepts the real script's flags with their types, choices and defaults for the
tasks ``t2v-A14B``, ``i2v-A14B``, ``ti2v-5B`` and ``s2v-14B``; refuses what the real
script refuses (a size outside the task's list, ``--ulysses_size`` not dividing
the 40 attention heads or not equal to the torchrun world size, FSDP without
torchrun) with argparse's exit status 2, and also ``--frame_num`` that is not
4n+1 (the documented constraint). Estimates device memory (``_standin_common``)
and dies with ``torch.OutOfMemoryError: CUDA out of memory`` (exit 1) past
``STANDIN_GPU_MEMORY_GB``; otherwise rank 0 writes ``--save_file`` (mp4 or npz)
at 16 fps (24 for ti2v-5B) rendered at 1/8 of ``--size``; for s2v-14B the drawn mouth
opens with the loudness of ``--audio`` and the mp4 carries that audio as its AAC track
(the real script muxes it in). For the tuner's tests.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _standin_common import (  # noqa: E402
    audio_seconds,
    check_memory,
    hold_host_memory,
    mouth_openings,
    read_wav,
    render_frames,
    simulate_compute,
    simulated_vram_gb,
    str2bool,
    write_video,
)

SUPPORTED_SIZES = {
    "t2v-A14B": ["720*1280", "1280*720", "480*832", "832*480"],
    "i2v-A14B": ["720*1280", "1280*720", "480*832", "832*480"],
    "ti2v-5B": ["704*1280", "1280*704"],
    "s2v-14B": ["720*1280", "1280*720", "480*832", "832*480", "1024*704", "704*1024", "704*1280", "1280*704"],
}
ALL_SIZES = sorted({size for sizes in SUPPORTED_SIZES.values() for size in sizes})
NUM_HEADS = 40
MODEL_GB = {"t2v-A14B": 28.0, "i2v-A14B": 28.0, "ti2v-5B": 10.0, "s2v-14B": 32.0}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="STAND-IN for Wan2.2 generate.py (simulated)")
    parser.add_argument("--task", type=str, default="t2v-A14B", choices=sorted(SUPPORTED_SIZES))
    parser.add_argument("--size", type=str, default="1280*720", choices=ALL_SIZES)
    parser.add_argument("--frame_num", type=int, default=None)
    parser.add_argument("--ckpt_dir", type=str, default=None)
    parser.add_argument("--offload_model", type=str2bool, default=None)
    parser.add_argument("--ulysses_size", type=int, default=1)
    parser.add_argument("--t5_fsdp", action="store_true", default=False)
    parser.add_argument("--t5_cpu", action="store_true", default=False)
    parser.add_argument("--dit_fsdp", action="store_true", default=False)
    parser.add_argument("--save_file", type=str, default=None)
    parser.add_argument("--prompt", type=str, default=None)
    parser.add_argument("--base_seed", type=int, default=-1)
    parser.add_argument("--image", type=str, default=None)
    parser.add_argument("--audio", type=str, default=None)
    parser.add_argument("--num_clip", type=int, default=None)
    parser.add_argument("--infer_frames", type=int, default=80)
    parser.add_argument("--sample_solver", type=str, default="unipc", choices=["unipc", "dpm++", "euler"])
    parser.add_argument("--sample_steps", type=int, default=None)
    parser.add_argument("--sample_shift", type=float, default=None)
    parser.add_argument("--sample_guide_scale", type=float, default=None)
    parser.add_argument("--convert_model_dtype", action="store_true", default=False)
    args = parser.parse_args(argv)
    world = int(os.environ.get("WORLD_SIZE", 1))
    if args.ckpt_dir is None:
        parser.error("Please specify the checkpoint directory.")
    if args.size not in SUPPORTED_SIZES[args.task]:
        parser.error(
            f"Unsupport size {args.size} for task {args.task}, supported sizes are: "
            f"{', '.join(SUPPORTED_SIZES[args.task])}"
        )
    if args.frame_num is not None and (args.frame_num < 5 or args.frame_num % 4 != 1):
        parser.error(f"--frame_num must be 4n+1 (got {args.frame_num})")
    if NUM_HEADS % args.ulysses_size:
        parser.error(
            f"`cfg.num_heads={NUM_HEADS}` cannot be divided evenly by `args.ulysses_size={args.ulysses_size}`."
        )
    if args.ulysses_size > 1 and args.ulysses_size != world:
        parser.error(f"The number of ulysses_size should be equal to the world size ({world}).")
    if world == 1 and (args.t5_fsdp or args.dit_fsdp):
        parser.error("t5_fsdp and dit_fsdp are not supported in non-distributed environments.")
    if args.t5_fsdp and args.t5_cpu:
        parser.error("--t5_fsdp and --t5_cpu cannot be combined")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    width, height = (int(v) for v in args.size.split("*"))
    frames = args.frame_num or 81
    if args.task == "s2v-14B":
        clip = args.infer_frames
        clips = args.num_clip or max(1, int(audio_seconds(args.audio) * 16 // clip))
        frames = clips * clip
    else:
        clip = frames
    steps = args.sample_steps or 40
    offload = args.offload_model if args.offload_model is not None else world == 1
    needed = simulated_vram_gb(width, height, clip // 2, offload, False, False, MODEL_GB[args.task])
    needed = needed / world if args.dit_fsdp else needed
    needed = max(1.0, needed - (5.0 if args.t5_cpu else 0.0))
    print(
        f"[stand-in] rank {rank}: estimated {needed:.1f} GB for {args.task} {args.size} x {frames} frames", flush=True
    )
    check_memory(needed)
    held = hold_host_memory(needed)
    simulate_compute(
        0.0004
        * steps
        * (width * height / (832 * 480))
        * (clip / 81) ** 2
        * (1.2 if offload else 1)
        / max(1, world) ** 0.8
    )
    if rank == 0:
        fps = 24 if args.task == "ti2v-5B" else 16
        sound = read_wav(args.audio) if args.task == "s2v-14B" and args.audio else None
        openings = mouth_openings(sound[0], sound[1], frames, fps) if sound is not None else None
        video = render_frames(width, height, frames, max(0, args.base_seed), max(1, steps // 10), openings=openings)
        save = args.save_file or "output.mp4"
        write_video(save, video, fps=fps, audio=sound)  # s2v: the input audio muxed in, as generate.py does
        print(f"Saving generated video to {save}", flush=True)
    del held
    return 0


if __name__ == "__main__":
    sys.exit(main())
