"""Progress demo (not a test): october_setup on the K16/V8 stand-in world of the tests, then a no-op re-run.
The stand-in torch wheel is padded to 12 MB and the base wheel to 24 MB; both are served at RATE bytes/s
(torch from the find-links page uv installs from, so uv's own download shows as a bar in the env step).
Run it in a terminal (or tmux) to watch the bars; bench/captures/progress-setup.txt is a tmux capture of

    tmux new-session -d -s demo -x 130 -y 50 "uv run --group test python bench/progress_demo.py 4000000 600"
    tmux capture-pane -p -t demo
"""
import base64
import hashlib
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.fixtures.findlinks_server import serve_find_links  # noqa: E402
from tests.fixtures.stack_forks import TORCH  # noqa: E402
from tests.test_setup_k16v8_e2e import make_k16v8_world, write_recipe  # noqa: E402


def pad(wheel: Path, member: str, size: int) -> None:
    """Add ``member`` of ``size`` random bytes to ``wheel``, its RECORD kept right."""
    data = os.urandom(size)
    with zipfile.ZipFile(wheel) as zf:
        items = {n: zf.read(n) for n in zf.namelist()}
    rec = next(n for n in items if n.endswith("RECORD"))
    h = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    items[member] = data
    items[rec] = items[rec].replace(rec.encode() + b",,", f"{member},{h},{size}\n".encode() + rec.encode() + b",,")
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
        for n, d in items.items():
            zf.writestr(n, d)


def main(rate: float, linger: float) -> None:
    root = Path(tempfile.mkdtemp(prefix="october-progress-demo-"))
    w = make_k16v8_world(root)
    wheel = w["wheel"]
    assert isinstance(wheel, Path)
    torch_wheel = next((root / "links").glob(f"torch-{TORCH}-*.whl"))
    pad(wheel, "vllm/_pad.bin", 24 << 20)
    pad(torch_wheel, "torch/_pad.bin", 12 << 20)
    print(f"base wheel {wheel.stat().st_size} bytes, torch wheel {torch_wheel.stat().st_size} bytes", flush=True)
    with serve_find_links(wheel.parent, rate=rate) as served, serve_find_links(root / "links", rate=rate) as links:
        recipe = write_recipe(root, w, served.url + wheel.name)
        recipe.write_text(recipe.read_text().replace('find_links = ["links"]', f'find_links = ["{links.url}"]'))
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_")}
        argv = [sys.executable, "-m", "october.installer.october_setup", str(root / "stack"), "--recipe", str(recipe),
                "--cache-dir", str(root / "cache"), "--skip-preflight", "nvcc"]
        subprocess.run(argv, cwd=ROOT, env=env)
        print("--- no-op re-run ---", flush=True)
        subprocess.run(argv, cwd=ROOT, env=env)
    time.sleep(linger)


if __name__ == "__main__":
    main(float(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 0)
