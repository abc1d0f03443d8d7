"""STAND-IN for Live Avatar's ``minimal_inference/s2v_streaming_interact.py`` (SIMULATED, no model).

Accepts the real script's flags (the ones the tuner's ``live_avatar.yaml`` uses,
with the same types, choices and defaults), validates them the way the real
script does (argparse exit 2 for a bad choice or value), estimates the memory the
real 14B model would need and fails with PyTorch's ``torch.OutOfMemoryError: CUDA
out of memory`` message and exit status 1 past ``STANDIN_GPU_MEMORY_GB`` (see
``_standin_common``), else writes ``--save_file`` (mp4, or npz by suffix) at 25 fps
with ``min(num_clip * infer_frames, audio seconds * 25)`` frames rendered at 1/8 of
``--size``: a drawn face whose mouth opens with the loudness of ``--audio`` (a 16-bit
WAV), frame by frame and without lag; the mp4 carries that audio as its AAC track, as
the real script muxes the input audio into its output (H.264 + AAC, written with PyAV).
``STANDIN_MUX_AUDIO=0`` writes the mp4 without the audio track, as the real script does
when its ffmpeg mux fails (the mouth still follows ``--audio``). Run under :mod:`standins.torchrun_standin` it behaves per rank like the
real one: only rank 0 writes the video. Used only by the tuner's tests and demos.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _standin_common import (  # noqa: E402
    FPS,
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

SIZES = [
    "720*400",
    "704*384",
    "688*368",
    "640*352",
    "576*320",
    "512*288",
    "480*272",
    "384*256",
    "1280*720",
    "720*1280",
    "832*480",
    "480*832",
    "1024*704",
    "704*1024",
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="STAND-IN for Live Avatar s2v_streaming_interact.py (simulated)")
    parser.add_argument("--task", type=str, default="s2v-14B", choices=["s2v-14B"])
    parser.add_argument("--size", type=str, default="1280*720", choices=SIZES)
    parser.add_argument("--ckpt_dir", type=str, default=None)
    parser.add_argument("--offload_model", type=str2bool, default=None)
    parser.add_argument("--ulysses_size", type=int, default=1)
    parser.add_argument("--save_file", type=str, default=None)
    parser.add_argument("--prompt", type=str, default=None)
    parser.add_argument("--base_seed", type=int, default=-1)
    parser.add_argument("--image", type=str, default=None)
    parser.add_argument("--audio", type=str, default=None)
    parser.add_argument("--sample_solver", type=str, default="euler", choices=["euler", "unipc", "dpm++"])
    parser.add_argument("--sample_steps", type=int, default=None)
    parser.add_argument("--sample_guide_scale", type=float, default=None)
    parser.add_argument("--convert_model_dtype", action="store_true", default=False)
    parser.add_argument("--num_clip", type=int, default=None)
    parser.add_argument("--infer_frames", type=int, default=80)
    parser.add_argument("--load_lora", action="store_true", default=False)
    parser.add_argument("--lora_path_dmd", type=str, default=None)
    parser.add_argument("--training_config", type=str, default=None)
    parser.add_argument("--num_gpus_dit", type=int, default=4)
    parser.add_argument("--enable_vae_parallel", action="store_true", default=False)
    parser.add_argument("--offload_kv_cache", action="store_true", default=False)
    parser.add_argument("--enable_online_decode", action="store_true", default=False)
    parser.add_argument("--fp8", action="store_true", default=False)
    args = parser.parse_args(argv)
    if args.ckpt_dir is None:
        parser.error("Please specify the checkpoint directory.")
    if args.sample_steps is not None and not 1 <= args.sample_steps <= 4:
        parser.error("--sample_steps: the distilled (DMD) model samples 1..4 steps")
    if args.infer_frames < 4 or args.infer_frames % 4:
        parser.error("--infer_frames must be a multiple of 4")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    width, height = (int(v) for v in args.size.split("*"))
    steps = args.sample_steps or 4
    offload = args.offload_model if args.offload_model is not None else world == 1
    needed = simulated_vram_gb(width, height, args.infer_frames, offload, args.offload_kv_cache, args.fp8)
    needed /= max(1, world) ** 0.5 if world > 1 else 1
    print(f"world_size: {world}")
    print(
        f"[stand-in] rank {rank}: estimated {needed:.1f} GB of device memory for {args.size} x "
        f"{args.infer_frames} frames",
        flush=True,
    )
    check_memory(needed)
    held = hold_host_memory(needed)
    duration = audio_seconds(args.audio)
    limit = int(duration * FPS)
    frames = min((args.num_clip or 10**6) * args.infer_frames, limit)
    clips = -(-frames // args.infer_frames)
    cost = 0.002 * steps * clips * (width * height / (688 * 368)) * (args.infer_frames / 48) ** 2
    simulate_compute(cost * (1.15 if offload else 1.0) * (0.8 if args.fp8 else 1.0))
    if rank == 0:
        seed = args.base_seed if args.base_seed >= 0 else 0
        sound = read_wav(args.audio) if args.audio else None
        openings = mouth_openings(sound[0], sound[1], frames) if sound is not None else None
        video = render_frames(width, height, frames, seed, steps, openings=openings)
        save = args.save_file or "output.mp4"
        muxed = sound if os.environ.get("STANDIN_MUX_AUDIO", "1") != "0" else None
        write_video(save, video, audio=muxed)
        print(f"Saving generated video to {save}", flush=True)
    del held
    return 0


if __name__ == "__main__":
    sys.exit(main())
