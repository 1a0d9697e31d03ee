"""Resumable downloads with size and checksum checks, used by the data_prep scripts.

    python data_prep/fetch.py --out DIR URL[#sha256=HEX] [URL ...]

Each URL is saved as DIR/<basename>. A partial download is kept as <basename>.part and resumed with an
HTTP Range request on the next run; a finished file is checked against the size the server announced
and, where given, its SHA-256 (a mismatch deletes the file and exits non-zero); `.tgz`/`.tar.gz`/`.zip`
archives are also checked for integrity. A file already present and valid is not fetched again.
Without network it stops with "cannot reach <url>: no network? pass --local DIR with the files instead".
"""

import argparse
import hashlib
import http.client
import os
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile

CHUNK = 1 << 20


class FetchError(RuntimeError):
    pass


def sha256sum(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def check_archive(path):
    """Raise FetchError when an archive is truncated or corrupt (by its name: .tgz, .tar.gz, .zip)."""
    name = os.path.basename(path)
    try:
        if name.endswith((".tgz", ".tar.gz", ".tar")):
            with tarfile.open(path) as tar:
                for _ in tar:  # reading every member header walks (and decompresses) the whole file
                    pass
        elif name.endswith(".zip"):
            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
                if bad is not None:
                    raise FetchError(f"{path}: corrupt member {bad}")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as e:
        raise FetchError(f"{path}: corrupt or truncated archive ({e})") from e


def split_spec(spec):
    url, _, extra = spec.partition("#")
    sha = extra[len("sha256="):] if extra.startswith("sha256=") else None
    return url, sha


def fetch(url, out_dir, sha256=None, timeout=30, quiet=False):
    """Download url into out_dir (resuming a .part file) and return the final path."""
    os.makedirs(out_dir, exist_ok=True)
    dest = os.path.join(out_dir, os.path.basename(url.rstrip("/")))
    part = dest + ".part"
    if os.path.exists(dest):
        verify(dest, sha256)
        if not quiet:
            print(f"[fetch] {dest} already there, verified", flush=True)
        return dest
    have = os.path.getsize(part) if os.path.exists(part) else 0
    request = urllib.request.Request(url, headers={"User-Agent": "fairseq-eva-data-prep"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # the .part file is already complete
            total = have
            response = None
        else:
            raise FetchError(f"cannot download {url}: HTTP {e.code} {e.reason}") from e
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise FetchError(f"cannot reach {url} ({reason}): no network? pass --local DIR with the files instead") from e
    if response is not None:
        with response:
            if have and response.status == 206:
                content_range = response.headers.get("Content-Range", "")  # bytes a-b/total
                total = int(content_range.rsplit("/", 1)[1]) if "/" in content_range else None
                mode = "ab"
            else:  # the server ignored the Range request: start again
                have, mode = 0, "wb"
                length = response.headers.get("Content-Length")
                total = int(length) if length is not None else None
            if not quiet:
                size = f"{total / 1e6:.1f} MB" if total else "unknown size"
                print(f"[fetch] {url} -> {dest} ({size}{', resuming at %d bytes' % have if have else ''})", flush=True)
            with open(part, mode) as f:
                try:
                    while True:
                        block = response.read(CHUNK)
                        if not block:
                            break
                        f.write(block)
                except (http.client.IncompleteRead, OSError) as e:
                    f.flush()
                    raise FetchError(f"{url}: interrupted after {f.tell()} bytes ({e}); run again to resume") from e
    got = os.path.getsize(part)
    if total is not None and got != total:
        raise FetchError(f"{url}: got {got} of {total} bytes; run again to resume")
    os.replace(part, dest)
    try:
        verify(dest, sha256)
    except FetchError:
        os.remove(dest)
        raise
    return dest


def verify(path, sha256=None):
    if sha256 is not None:
        got = sha256sum(path)
        if got != sha256.lower():
            raise FetchError(f"{path}: SHA-256 {got} does not match the expected {sha256}")
    check_archive(path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory to download into")
    parser.add_argument("--timeout", type=float, default=30, help="seconds to wait for a server")
    parser.add_argument("urls", nargs="+", metavar="URL[#sha256=HEX]")
    args = parser.parse_args(argv)
    try:
        for spec in args.urls:
            url, sha = split_spec(spec)
            fetch(url, args.out, sha, timeout=args.timeout)
    except FetchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
