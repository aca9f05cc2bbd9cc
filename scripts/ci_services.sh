# Services the results-store tests need, for CI: a throwaway PostgreSQL server and a headless Chromium.
#
#   source scripts/ci_services.sh      # (bash) then run the tests in the same shell
#
# - installs Debian's postgresql, chromium and chromium-driver with apt-get when they are missing (as root);
# - makes a new PostgreSQL cluster in a temporary folder (initdb, trust authentication on 127.0.0.1 only, a free
#   port, fsync off: nothing in it needs to survive), started with pg_ctl as the user 'postgres' when run as root;
# - exports DEEP500LITE_TEST_POSTGRES=postgresql://postgres@127.0.0.1:PORT/postgres, which tests/results use to
#   create (and drop) a database per test;
# - a watcher stops the server and deletes the folder when the shell that sourced this file exits.
# Any failure stops CI here with the reason: the PostgreSQL and browser tests must not be skipped there.

d5_services() {
    local need=() sudo_pg=() bindir dir port
    command -v chromium >/dev/null 2>&1 || need+=(chromium)
    command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || need+=(postgresql)
    if [ ${#need[@]} -gt 0 ]; then
        echo "ci_services: installing ${need[*]} (apt-get)"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    fi
    bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    [ -n "$bindir" ] || bindir=$(dirname "$(command -v initdb)")
    dir=$(mktemp -d /tmp/d5-postgres.XXXXXX)
    if [ "$(id -u)" = 0 ]; then
        chown postgres "$dir"
        sudo_pg=(runuser -u postgres --)
    fi
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "${sudo_pg[@]}" "$bindir/initdb" -D "$dir/data" --auth=trust --username=postgres --encoding=UTF8 \
        --no-instructions >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log"; return 1; }
    "${sudo_pg[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-k $dir -p $port -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start \
        >/dev/null || { cat "$dir/server.log"; return 1; }
    export DEEP500LITE_TEST_POSTGRES="postgresql://postgres@127.0.0.1:$port/postgres"
    # Stop the server when the shell that sourced this file ends (no trap: the caller may set its own).
    (
        while kill -0 "$1" 2>/dev/null; do sleep 2; done
        "${sudo_pg[@]}" "$bindir/pg_ctl" -D "$dir/data" -m immediate stop
        rm -rf "$dir"
    ) </dev/null >/dev/null 2>&1 &
    disown $! 2>/dev/null || true
    echo "ci_services: PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') at $DEEP500LITE_TEST_POSTGRES" \
         "($dir); $(chromium --version 2>/dev/null | head -n 1)"
}

d5_services "$$"
