#!/usr/bin/env bash
# Real prose for needle studies: Arthur Conan Doyle's "The Adventures of Sherlock Holmes" (public domain;
# Project Gutenberg eBook #1661), as Debian's golang-github-pierrec-lz4-dev 2.5.2-2 ships it for its
# compression tests (/usr/share/gocode/src/github.com/pierrec/lz4/testdata/pg1661.txt). The package is
# downloaded, not installed (apt-get download, dpkg-deb -x), the file's sha256 checked, and the book's
# text between Project Gutenberg's START and END lines written with Unix line ends, checked again:
#   scripts/fetch-haystack.sh            prints the path: ${XDG_CACHE_HOME:-~/.cache}/kvtrace/haystacks/sherlock-holmes.txt
# Then: kvtrace prompts niah --haystack "$(scripts/fetch-haystack.sh)" ...
set -euo pipefail
PKG=golang-github-pierrec-lz4-dev
MEMBER=usr/share/gocode/src/github.com/pierrec/lz4/testdata/pg1661.txt
FILE_SHA=242ec73a70f0a03dcbe007e32038e7deeaee004aaec9a09a07fa322743440fa8
TEXT_SHA=9fafb70556b0211ea4e5de5c1b05259027ad4397c407dd33a558a26810923ac9
DIR=${XDG_CACHE_HOME:-$HOME/.cache}/kvtrace/haystacks
OUT=$DIR/sherlock-holmes.txt

sha() { sha256sum "$1" | cut -d' ' -f1; }
if [ -f "$OUT" ] && [ "$(sha "$OUT")" = "$TEXT_SHA" ]; then echo "$OUT"; exit 0; fi
mkdir -p "$DIR"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download "$PKG" >/dev/null 2>"$tmp/apt.err") || {
    echo "fetch-haystack.sh: apt-get download $PKG failed: $(tail -n 1 "$tmp/apt.err")" >&2; exit 1; }
dpkg-deb -x "$tmp"/"$PKG"_*.deb "$tmp/x"
src=$tmp/x/$MEMBER
[ -f "$src" ] || { echo "fetch-haystack.sh: $PKG no longer ships $MEMBER" >&2; exit 1; }
[ "$(sha "$src")" = "$FILE_SHA" ] || {
    echo "fetch-haystack.sh: $MEMBER: sha256 $(sha "$src"), expected $FILE_SHA" >&2; exit 1; }
awk '/^\*\*\* START OF THIS PROJECT GUTENBERG/ {on = 1; next} /^\*\*\* END OF THIS PROJECT GUTENBERG/ {on = 0} on' \
    "$src" | tr -d '\r' > "$tmp/text"
[ "$(sha "$tmp/text")" = "$TEXT_SHA" ] || { echo "fetch-haystack.sh: the extracted text's sha256 differs" >&2; exit 1; }
mv "$tmp/text" "$OUT"
echo "$OUT"
