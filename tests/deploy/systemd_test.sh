#!/bin/sh
# deploy/systemd: `systemd-analyze verify` of every unit (with the build's
# binaries standing in for /usr/local/bin, each template as an instance),
# every warning counted as a failure; `systemd-analyze security --offline`
# under a threshold; the flags in ExecStart= known to each binary's --help.
set -u
SRC=${KCLAW_SRC:?}
BIN=${KCLAW_BIN:?}
D=$SRC/deploy/systemd
if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "SKIP: systemd-analyze not found (apt-get install systemd; tools/install-deps.sh does)"
	exit 77
fi
echo "$(systemd-analyze --version | head -1)"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

for f in "$D"/*.service "$D"/*.target; do
	sed "s#/usr/local/bin/#$BIN/#g" "$f" >"$T/$(basename "$f")"
done
ln -s kclaw-agent@.service "$T/kclaw-agent@planner.service"
ln -s kclaw-sandbox@.service "$T/kclaw-sandbox@3.service"
units="kclaw.target kclawd.service kclaw-agent@planner.service kclaw-sandbox@3.service"

# verify: exit 0 and not one line of complaint.
(cd "$T" && systemd-analyze verify --man=no $(for u in $units; do echo "./$u"; done)) >"$T/verify.out" 2>&1
rc=$?
if [ $rc -ne 0 ] || [ -s "$T/verify.out" ]; then
	bad "systemd-analyze verify (rc $rc):"
	cat "$T/verify.out"
else
	echo "ok   systemd-analyze verify: $units"
fi

# The same with a broken key must fail: the check sees what it should.
sed 's/^NoNewPrivileges=yes/NoNewPrivileges=maybe/' "$T/kclawd.service" >"$T/broken.service"
(cd "$T" && systemd-analyze verify --man=no ./broken.service) >"$T/broken.out" 2>&1
grep -q "NoNewPrivileges\|boolean" "$T/broken.out" || bad "verify did not notice a broken unit"

# Hardening: the offline exposure score (0 safe .. 10 unsafe), at most 2.5.
for u in kclawd.service kclaw-agent@planner.service kclaw-sandbox@3.service; do
	if (cd "$T" && systemd-analyze security --offline=yes --threshold=25 --no-pager "./$u") >"$T/sec.out" 2>&1; then
		echo "ok   $(tail -1 "$T/sec.out" | sed 's/^→ //')"
	else
		bad "$u: exposure over 2.5: $(tail -1 "$T/sec.out")"
	fi
done

# What each unit must say.
for u in kclawd.service kclaw-agent@.service kclaw-sandbox@.service; do
	for k in "^Restart=" "^RestartSec=" "^NoNewPrivileges=yes" "^ProtectSystem=strict" \
		"^ReadWritePaths=/var/lib/kclaw" "^StateDirectory=kclaw" "^PrivateTmp=yes" \
		"^ProtectHome=yes" "^RestrictAddressFamilies=" "^EnvironmentFile=/etc/kclaw/kclaw.env" \
		"^User=kclaw" "^WantedBy=kclaw.target" "^PartOf=kclaw.target" "^WorkingDirectory=/var/lib/kclaw"; do
		grep -q "$k" "$D/$u" || bad "$u lacks $k"
	done
done
grep -q '^DevicePolicy=closed' "$D/kclaw-sandbox@.service" || bad "sandbox: DevicePolicy=closed"
grep -q '^DeviceAllow=/dev/nvidia%i rw' "$D/kclaw-sandbox@.service" || bad "sandbox: DeviceAllow of its GPU"
grep -q '^DeviceAllow=/dev/nvidiactl rw' "$D/kclaw-sandbox@.service" || bad "sandbox: DeviceAllow /dev/nvidiactl"
grep -q -- '--device %i' "$D/kclaw-sandbox@.service" || bad "sandbox: --device %i"
grep -q -- '--role %i' "$D/kclaw-agent@.service" || bad "agent: --role %i"
grep -q '^Wants=kclawd.service' "$D/kclaw.target" || bad "kclaw.target does not pull in kclawd"
# The watchdog: kclawd notifies readiness and feeds WatchdogSec itself.
grep -q '^Type=notify$' "$D/kclawd.service" && grep -q '^WatchdogSec=' "$D/kclawd.service" &&
	grep -q '^NotifyAccess=main$' "$D/kclawd.service" || bad "kclawd.service has no notify watchdog"

# Every option an ExecStart= passes is one its binary documents.
for u in kclawd.service kclaw-agent@.service kclaw-sandbox@.service; do
	line=$(sed -n 's#^ExecStart=/usr/local/bin/##p' "$D/$u")
	prog=${line%% *}
	help=$("$BIN/$prog" --help 2>&1)
	for opt in $(echo "$line" | tr ' ' '\n' | grep '^--'); do
		echo "$help" | grep -q -- "$opt" || bad "$u: $prog --help does not know $opt"
	done
done

# systemd >= 254 knows the exponential backoff of restart-backoff.conf.
v=$(systemd-analyze --version | sed -n '1s/^systemd \([0-9]*\).*/\1/p')
if [ "${v:-0}" -ge 254 ]; then
	mkdir -p "$T/kclawd.service.d"
	cp "$D/restart-backoff.conf" "$T/kclawd.service.d/"
	out=$(cd "$T" && systemd-analyze verify --man=no ./kclawd.service 2>&1)
	[ -z "$out" ] || bad "restart-backoff.conf: $out"
else
	echo "note restart-backoff.conf not verified: systemd $v < 254 does not know RestartSteps="
fi

[ $fails -eq 0 ] && echo "deploy_systemd: all checks passed" || echo "deploy_systemd: $fails failures"
[ $fails -eq 0 ]
