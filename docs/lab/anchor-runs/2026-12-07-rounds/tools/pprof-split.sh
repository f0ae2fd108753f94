#!/bin/bash
# pprof-split.sh [-other] PROF...: share of each CPU profile's samples by bucket (by its stack, first match wins);
# with -other, the leaf functions of the "other Go" bucket instead, each as a share of all the profile's samples
other=0; if [ "$1" = -other ]; then other=1; shift; fi
for p in "$@"; do
go tool pprof -traces "$p" 2>/dev/null | awk -v name="$(basename $p)" -v other=$other '
function val(s,  v){ v=s+0; if (s ~ /us$/) v/=1000; else if (s ~ /ms$/) v=v; else if (s ~ /s$/) v*=1000; return v }
function flush(  c){ if (stack=="") return
  c="other Go (mux, framing, stream)"
  if (stack ~ /poly32|poly1305|hmacMAC|\.MAC|nhpoly/) c="MAC (software)"
  else if (stack ~ /cryptodev|afalg|AFALG|Cryptodev/) c="device requests"
  else if (stack ~ /fips140\/aes|softCrypter/) c="AES (software)"
  else if (stack ~ /Syscall|syscall\.|poll\.|writev|readv/ && stack ~ /placeReader|localWriter|splicer|stream\./) c="local socket calls"
  else if (stack ~ /Syscall|syscall\.|poll\.|writev|readv/ && stack ~ /record\.|linkReader/) c="link socket calls"
  else if (stack ~ /Syscall|syscall\.|poll\.|writev|readv/) c="local socket calls"
  else if (stack ~ /runtime\.(gcBgMarkWorker|gcDrain|mallocgc|markroot|bgsweep|bgscavenge|gcAssist)/) c="GC, allocation"
  else if (stack ~ /runtime\.(schedule|findRunnable|park_m|mcall|gopark|goready|ready|nanotime|futex|notesleep|notewakeup|sysmon|checkTimers|stopm|startm|handoffp|entersyscall|exitsyscall|netpoll|morestack|newstack|preempt|asyncPreempt|sigtramp|sighandler|gosched|goschedImpl|execute|casgstatus|runqget|wakep|lock2|unlock2|_LostSIGPROF)/) c="Go runtime: scheduling, timers, signals"
  else if (stack ~ /memmove|memclr/) c="copies in user space"
  S[c]+=cur; T+=cur
  if (other && c ~ /^other Go/) { split(stack, L, "\n"); leaf=L[1]; sub(/^ +[0-9.]+(ms|s|us) +/, "", leaf); O[leaf]+=cur }
  stack="" }
/^-----------/ { flush(); next }
/^ +[0-9.]+(ms|s|us) / { flush(); cur=val($1); stack=$0; next }
/^ +[^ ]/ && stack!="" { stack=stack "\n" $0 }
END { flush(); printf "%s (%.0f ms sampled)\n", name, T
  if (other) { for (f in O) if (100*O[f]/T >= 0.25) printf "  %5.2f%%  %s\n", 100*O[f]/T, f; exit }
  for (c in S) printf "  %5.1f%%  %s\n", 100*S[c]/T, c }' | (read h; sort -rn; echo "$h") 
done
