#!/bin/sh
# Builds the Debian package from a built tree with dpkg-deb (no debhelper):
#   packaging/mkdeb.sh [BUILD_DIR [OUT_DIR]]    (default build, build)
# prints the path of the .deb. Depends comes from dpkg-shlibdeps when it is installed
# (dpkg-dev), else from the list below.
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-$build}
version=$("$build/ferry" version | sed 's/^ferry //')-1
arch=$(dpkg --print-architecture)
stage=$(mktemp -d "${TMPDIR:-/tmp}/ferry-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT INT TERM
root=$stage/root

DESTDIR=$root PREFIX=/usr UNITDIR=/lib/systemd/system SYSCONFDIR=/etc \
  packaging/install.sh "$build" >/dev/null
# release binaries without debug sections; man pages compressed (Debian policy 12.1)
for b in "$root/usr/bin/ferry" "$root/usr/bin/ferry-load"; do
  strip --strip-unneeded --remove-section=.comment --remove-section=.note "$b"
done
gzip -9n "$root/usr/share/man/man1/ferry.1" "$root/usr/share/man/man1/ferry-load.1" "$root/usr/share/man/man5/ferry.yaml.5"
doc=$root/usr/share/doc/ferry
install -d -m 0755 "$doc"
cat > "$doc/copyright" <<'TXT'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: ferry

Files: *
Copyright: 2026 the Ferry authors
License: unspecified
 The source repository states no licence yet; ask the Ferry authors.
TXT
printf 'ferry (%s) unstable; urgency=medium\n\n  * Built by make deb.\n\n -- Ferry maintainers <ferry@example.org>  %s\n' \
  "$version" "$(date -R -u -d @"${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")" \
  | gzip -9n > "$doc/changelog.Debian.gz"
chmod 0644 "$doc/copyright" "$doc/changelog.Debian.gz"

depends=
if command -v dpkg-shlibdeps >/dev/null 2>&1; then
  mkdir -p "$stage/src/debian"
  printf 'Source: ferry\n\nPackage: ferry\nArchitecture: any\n' > "$stage/src/debian/control"
  depends=$(cd "$stage/src" && dpkg-shlibdeps -O "$root/usr/bin/ferry" "$root/usr/bin/ferry-load" \
              2>/dev/null | sed -n 's/^shlibs:Depends=//p')
fi
if [ -z "$depends" ]; then
  depends="libc6, libssl3, libyaml-0-2, libnghttp2-14, libpcre2-8-0, libngtcp2-9, \
libngtcp2-crypto-gnutls2, libnghttp3-3, libgnutls30, zlib1g, libbrotli1, libzstd1, libsystemd0"
fi
depends="adduser, $depends"

install -d -m 0755 "$root/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@SIZE@|$size|" \
  -e "s|@DEPENDS@|$depends|" packaging/debian/control.in > "$root/DEBIAN/control"
install -m 0644 packaging/debian/conffiles "$root/DEBIAN/conffiles"
for s in postinst prerm postrm; do install -m 0755 "packaging/debian/$s" "$root/DEBIAN/$s"; done
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\n' | LC_ALL=C sort \
   | xargs md5sum) > "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/md5sums"
find "$root" -type d -exec chmod 0755 {} +

mkdir -p "$out"
deb=$out/ferry_${version}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
