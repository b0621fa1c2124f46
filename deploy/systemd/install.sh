#!/bin/sh
# Lays out the files of the txbox relay's systemd unit (docs/deploy.md):
#
#   deploy/systemd/install.sh ./txbox txbox.yaml      # as root
#
# then edit /etc/txbox/env, `systemctl daemon-reload`, run `txbox migrate`
# once and `systemctl enable --now txbox-relay` (the unit's header comment).
# DESTDIR installs under another root instead of / (a package build, a
# test). Running it again replaces the binary, the YAML and the unit, and
# keeps the env file.
set -eu
usage="usage: install.sh TXBOX-BINARY TXBOX.YAML"
bin=${1:?$usage}
conf=${2:?$usage}
unit=$(dirname "$0")/txbox-relay.service
root=${DESTDIR:-}

install -d -m 0755 "$root/usr/local/bin" "$root/etc/systemd/system"
install -m 0755 "$bin" "$root/usr/local/bin/txbox"
# The relay's user is dynamic: the directory and the YAML (no secret in
# it) must be readable by anyone.
install -d -m 0755 "$root/etc/txbox"
install -m 0644 "$conf" "$root/etc/txbox/txbox.yaml"
# Secrets stay root-only: systemd reads them as root (EnvironmentFile=,
# LoadCredential=) before it starts the relay.
install -d -m 0700 "$root/etc/txbox/credentials"
if [ ! -e "$root/etc/txbox/env" ]; then
	install -m 0600 /dev/null "$root/etc/txbox/env"
	printf '%s\n' \
		'# The variables database.dsn-env and the *-env keys name, e.g.' \
		"# APP_DSN='postgres://txbox:...@db.internal:5432/app?sslmode=require'" \
		'# Single quotes keep & ? ; and spaces literal for systemd and for' \
		'# the shell that sources this file to run txbox migrate.' >"$root/etc/txbox/env"
fi
install -m 0644 "$unit" "$root/etc/systemd/system/txbox-relay.service"
