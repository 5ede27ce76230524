#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# kbuild-version.sh VERSION < madison: the version of linux-kbuild-X.Y to build the guest
# driver with, for a kernel package of Debian version VERSION, from the lines of
# `apt-cache madison linux-kbuild-X.Y` on standard input: VERSION itself if the archive has
# it, else the first listed of the same upstream version (the kbuild tools are rebuilt on
# their own at times: 6.1.192-3 beside a 6.1.192-2 kernel), else VERSION (whose download
# then fails and says so).
awk -v want="$1" -v up="${1%-*}-" '
	$3 == want { exact = 1 }
	index($3, up) == 1 && !alt { alt = $3 }
	END { print (exact || !alt) ? want : alt }'
