#!/usr/bin/env bash
# Renders every Mermaid block of docs/*.md with the real renderer (mermaid-cli driving Debian's chromium), one PNG
# per block under out/pictures/<page>-<n>.png, and fails naming each block that does not render. It installs
# what it needs: chromium (and node and npm when missing) from apt, mermaid-cli from the npm registry into
# .cache/mermaid-cli (git-ignored). Not part of `make test`: the chromium install is heavy; a docs change runs it.
# Usage: scripts/docs-pictures.sh [page.md ...]   (default: docs/*.md)
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned: 11.x runs on Debian 12's node 18 as on newer ones (12.x needs node 22).
MMDC_VERSION=11.9.0
CACHE=$PWD/.cache/mermaid-cli
OUT=$PWD/out/pictures

log() { echo "docs-pictures: $*" >&2; }

need=()
for p in chromium nodejs npm fonts-dejavu-core; do
	case $p in
	nodejs | npm) command -v "${p/nodejs/node}" >/dev/null && continue ;;
	esac
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
	if [[ $(id -u) != 0 ]]; then
		log "missing Debian packages ${need[*]}; run as root or install them"
		exit 1
	fi
	log "installing ${need[*]}"
	apt-get -o DPkg::Lock::Timeout=300 update -qq
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends \
		"${need[@]}" >/dev/null
fi

mmdc=$CACHE/node_modules/.bin/mmdc
if [[ ! -x $mmdc ]] || [[ $(cat "$CACHE/.version" 2>/dev/null) != "$MMDC_VERSION" ]]; then
	log "installing @mermaid-js/mermaid-cli@$MMDC_VERSION into ${CACHE#"$PWD"/}"
	mkdir -p "$CACHE"
	# Puppeteer would download a chromium of its own; Debian's is used instead.
	(cd "$CACHE" && PUPPETEER_SKIP_DOWNLOAD=1 npm install --no-audit --no-fund --no-save --loglevel=error \
		"@mermaid-js/mermaid-cli@$MMDC_VERSION" >/dev/null)
	echo "$MMDC_VERSION" >"$CACHE/.version"
fi

# Chromium refuses to run as root with its sandbox on.
sandbox='[]'
[[ $(id -u) == 0 ]] && sandbox='["--no-sandbox"]'
cat >"$CACHE/puppeteer.json" <<EOF
{"executablePath": "/usr/bin/chromium", "args": $sandbox}
EOF

pages=("$@")
((${#pages[@]})) || pages=(docs/*.md)
rm -rf "$OUT" && mkdir -p "$OUT"
failed=()
total=0
for page in "${pages[@]}"; do
	base=$(basename "$page" .md)
	# Each ```mermaid block to <base>-<n>.mmd, its first line's number kept for the error.
	awk -v out="$OUT/$base" '
		/^```mermaid[[:space:]]*$/ { n++; f = out "-" n ".mmd"; print NR > (f ".line"); inside = 1; next }
		inside && /^```[[:space:]]*$/ { inside = 0; close(f); next }
		inside { print > f }
	' "$page"
	for mmd in "$OUT/$base"-*.mmd; do
		[[ -e $mmd ]] || continue
		total=$((total + 1))
		png=${mmd%.mmd}.png
		line=$(cat "$mmd.line")
		rm -f "$mmd.line"
		if ! err=$("$mmdc" -q -p "$CACHE/puppeteer.json" -s 2 -b white -i "$mmd" -o "$png" 2>&1) || [[ ! -s $png ]]; then
			failed+=("$page:$line")
			log "$page:$line: the Mermaid block starting there does not render:"
			printf '%s\n' "$err" | grep -v '^\s*at ' | head -n 8 >&2
			continue
		fi
		log "$page:$line: ${png#"$PWD"/}"
	done
done
if ((${#failed[@]})); then
	log "$((${#failed[@]})) of $total blocks do not render: ${failed[*]}"
	exit 1
fi
log "$total blocks rendered into ${OUT#"$PWD"/}"
