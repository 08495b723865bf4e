"""Progress demo (not a test): october_setup on the K16/V8 stand-in world of the tests, its base wheel
padded to 24 MB and served at RATE bytes/s, then a no-op re-run.  Run it in a terminal (or tmux) to
watch the bars; bench/captures/progress-setup.txt is a tmux capture of

    tmux new-session -d -s demo -x 130 -y 45 "uv run --group test python bench/progress_demo.py 4000000"
    tmux capture-pane -p -t demo
"""
import os, subprocess, sys, tempfile, time
from pathlib import Path
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.fixtures.findlinks_server import serve_find_links
from tests.test_setup_k16v8_e2e import make_k16v8_world, write_recipe
root = Path(tempfile.mkdtemp(prefix="october-progress-demo-"))
w = make_k16v8_world(root)
wheel = w["wheel"]
import zipfile, base64, hashlib
# pad the stand-in base wheel with 24 MB so the throttled download takes a while (RECORD kept right)
pad = os.urandom(24 << 20)
with zipfile.ZipFile(wheel) as zf:
    items = {n: zf.read(n) for n in zf.namelist()}
rec = next(n for n in items if n.endswith("RECORD"))
h = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(pad).digest()).rstrip(b"=").decode()
items["vllm/_pad.bin"] = pad
items[rec] = items[rec].replace(rec.encode() + b",,", f"vllm/_pad.bin,{h},{len(pad)}\n".encode() + rec.encode() + b",,")
with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
    for n, d in items.items():
        zf.writestr(n, d)
print(f"wheel {wheel.stat().st_size} bytes", flush=True)
with serve_find_links(wheel.parent, rate=float(sys.argv[1])) as served:
    recipe = write_recipe(root, w, served.url + wheel.name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_")}
    subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(root / "stack"), "--recipe", str(recipe),
                    "--cache-dir", str(root / "cache"), "--skip-preflight", "nvcc"], cwd=ROOT, env=env)
    print("--- no-op re-run ---", flush=True)
    subprocess.run([sys.executable, "-m", "october.installer.october_setup", str(root / "stack"), "--recipe", str(recipe),
                    "--cache-dir", str(root / "cache"), "--skip-preflight", "nvcc"], cwd=ROOT, env=env)
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0)
