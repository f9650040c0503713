#!/usr/bin/env bash
# The README's newcomer path, as written there, from a clean clone of the committed HEAD:
# the command after <!-- setup -->, then the one after <!-- serve --> (bare build/hearth) on a
# free port, then one chat completion through the API that must return non-empty text.
# HF_HOME is an empty directory, so bare hearth serves the bundled demo model.
# Usage: readme_commands_test.sh SOURCE_DIR
set -euo pipefail
src=$(cd "${1:?usage: readme_commands_test.sh SOURCE_DIR}" && pwd)
tmp=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    wait "$pid" || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# The same extraction as .ci/run: the first command line after the marker.
command_after() { awk -v m="<!-- $1 -->" '$0 == m {getline; while ($0 ~ /^```/ || $0 == "") getline; print; exit}' "$2"; }

git clone --quiet --no-hardlinks "$src" "$tmp/hearth"
cd "$tmp/hearth"
echo "clone: $(git log -1 --format='%h %s')"
setup=$(command_after setup README.md)
serve=$(command_after serve README.md)
[ -n "$setup" ] && [ -n "$serve" ] || { echo "README.md lacks the setup/serve markers" >&2; exit 1; }
case "$serve" in
  build/hearth*) ;;
  *) echo "the README's serve command is not bare build/hearth: $serve" >&2; exit 1 ;;
esac

# Packages come from the caches the first setup filled (npm), objects from ccache.
export npm_config_prefer_offline=true
start=$SECONDS
echo "+ $setup"
bash -c "$setup" >"$tmp/setup.log" 2>&1 || { tail -50 "$tmp/setup.log"; echo "setup failed" >&2; exit 1; }
echo "setup took $((SECONDS - start)) s"

mkdir -p "$tmp/hf"
export HF_HOME="$tmp/hf"
unset HEARTH_DEMO_MODEL

echo "+ $serve --port 0"
: >"$tmp/serve.out"  # exists before the background shell opens it, for the loop below
start_ms=$(date +%s%3N)
bash -c "exec $serve --port 0" >>"$tmp/serve.out" 2>"$tmp/serve.err" &
pid=$!
url=""
for _ in $(seq 1 300); do
  url=$(sed -n 's|^hearth: chat UI: \(http://[^ ]*\)$|\1|p' "$tmp/serve.out")
  [ -n "$url" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
cat "$tmp/serve.out" "$tmp/serve.err"
[ -n "$url" ] || { echo "bare hearth printed no chat UI URL" >&2; exit 1; }
echo "ready after $(($(date +%s%3N) - start_ms)) ms"
grep -q "^hearth: model .*: the bundled demo model" "$tmp/serve.out" || { echo "bare hearth did not pick the demo model" >&2; exit 1; }

python3 - "$url" <<'EOF'
import json, sys, urllib.request
url = sys.argv[1]
page = urllib.request.urlopen(url, timeout=30)
assert page.status == 200 and "text/html" in page.headers["Content-Type"], page.headers
body = {"messages": [{"role": "user", "content": "Tell me a short story."}], "max_tokens": 32}
req = urllib.request.Request(url + "v1/chat/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})
reply = json.load(urllib.request.urlopen(req, timeout=120))
text = reply["choices"][0]["message"]["content"]
print("model:", reply["model"])
assert reply["model"] == "hearth-demo", reply["model"]
print("reply:", repr(text))
assert isinstance(text, str) and text.strip(), "empty reply"
EOF
echo "readme commands: ok"
