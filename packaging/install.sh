#!/bin/sh
# Installs a built tree (what `make install` and `make deb` both run):
#   packaging/install.sh BUILD_DIR
# environment: DESTDIR (staging root, default empty), PREFIX (default /usr/local),
# UNITDIR (default $PREFIX/lib/systemd/system), SYSCONFDIR (default /etc).
# The binaries, the man pages (generated here from the binary, tools/gen-man.sh), the systemd
# unit, the default page, and the default configuration unless one is already there.
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr/local}
UNITDIR=${UNITDIR:-$PREFIX/lib/systemd/system}
SYSCONFDIR=${SYSCONFDIR:-/etc}
bindir=$PREFIX/bin
datadir=$PREFIX/share/ferry
mandir=$PREFIX/share/man

for b in ferry ferry-load; do
  [ -x "$build/$b" ] || { echo "install: $build/$b is not built (make build)" >&2; exit 1; }
done
tools/gen-man.sh "$build/ferry" "$build/man"

install -d -m 0755 "$DESTDIR$bindir" "$DESTDIR$mandir/man1" "$DESTDIR$mandir/man5" \
  "$DESTDIR$UNITDIR" "$DESTDIR$datadir/www" "$DESTDIR$SYSCONFDIR/ferry"
install -m 0755 "$build/ferry" "$build/ferry-load" "$DESTDIR$bindir/"
install -m 0644 "$build/man/ferry.1" "$build/man/ferry-load.1" "$DESTDIR$mandir/man1/"
install -m 0644 "$build/man/ferry.yaml.5" "$DESTDIR$mandir/man5/ferry.yaml.5"
install -m 0644 packaging/www/index.html "$DESTDIR$datadir/www/index.html"
sed -e "s|@BINDIR@|$bindir|g" -e "s|/etc/ferry/|$SYSCONFDIR/ferry/|g" \
  packaging/ferry.service.in > "$DESTDIR$UNITDIR/ferry.service"
chmod 0644 "$DESTDIR$UNITDIR/ferry.service"
conf=$DESTDIR$SYSCONFDIR/ferry/ferry.yaml
if [ -e "$conf" ]; then
  echo "install: keeping the existing $conf"
else
  sed "s|/usr/share/ferry/|$datadir/|g" packaging/ferry.yaml > "$conf"
  chmod 0644 "$conf"
fi
