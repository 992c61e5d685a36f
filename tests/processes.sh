# shellcheck shell=bash
# Sourced by the scripts that start and stop the tests' servers (tests/cluster/, tests/engines/).
# Each server runs in a process group of its own, its output in NAME.log and its pid in NAME.pid
# in the current directory, so stopping it stops whatever it started too.

start() { # start NAME COMMAND...: in the background, in a process group of its own, logged
  local name=$1
  shift
  setsid "$@" > "$name.log" 2>&1 < /dev/null &
  echo $! > "$name.pid"
}

alive() { # alive PID: a process that has exited is gone, even while its parent has not reaped it
  local state
  state="$(sed 's/.*) //' "/proc/$1/stat" 2> /dev/null | cut -d' ' -f1)"
  [ -n "$state" ] && [ "$state" != Z ]
}

wait_ready() { # wait_ready NAME PROBE...: until PROBE succeeds; exits if NAME ends or 120 s pass
  local name=$1
  shift
  for _ in $(seq 1 1200); do
    "$@" > /dev/null 2>&1 && return 0
    if ! alive "$(cat "$name.pid")"; then
      echo "$(basename "$0"): $name exited; the end of $PWD/$name.log:" >&2
      tail -20 "$name.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "$(basename "$0"): $name was not ready in 120 s; the end of $PWD/$name.log:" >&2
  tail -20 "$name.log" >&2
  exit 1
}

stop() { # stop PIDFILE: SIGTERM to the process group, SIGKILL after 10 s; true if it was running
  local pid running=1
  [ -f "$1" ] || return 1
  pid="$(cat "$1")"
  if alive "$pid"; then
    running=0
    kill -TERM -- "-$pid" 2> /dev/null || kill -TERM "$pid" 2> /dev/null
    for _ in $(seq 1 100); do
      alive "$pid" || break
      sleep 0.1
    done
    alive "$pid" && { kill -KILL -- "-$pid" 2> /dev/null || kill -KILL "$pid" 2> /dev/null; }
  fi
  rm -f "$1"
  return "$running"
}
