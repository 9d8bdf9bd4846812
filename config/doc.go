// Package config loads the bus configuration: the `websocket` section of the
// OVOS configuration stack (ovos-config), then the Rust bus's
// OVOS_BUS_CONFIG_FILE and OVOS_BUS_* variables, then command-line flags.
// It validates the result field by field and field against field, says
// which layer set each key, tells a reload what changed, and makes the
// self-signed TLS certificate.
//
//	cfg, prov, err := config.Load(config.LoadOptions{Flags: flags})
//	if err != nil { ... }           // an *Error naming file:line:col and key
//	for _, w := range prov.Warnings { log.Warn(w) }
//	cfg.Print(os.Stdout, prov)      // ovbus serve --print-config
//
// # Layers
//
// Lowest priority first; nested objects merge key by key, any other value
// (lists included) replaces the one below:
//
//  1. default: $OVOS_DEFAULT_CONFIG, else the bundled defaults
//     (defaults.conf in this package: the websocket table of
//     docs/protocol.md §4);
//  2. remote cache: $MYCROFT_WEB_CACHE, else
//     $XDG_CONFIG_HOME/<base>/web_cache.json. Its websocket and system
//     sections never apply, nor any key in system.protected_keys.remote;
//  3. distribution: $OVOS_DISTRIBUTION_CONFIG, else /usr/share/<base>/<file>;
//  4. system: $MYCROFT_SYSTEM_CONFIG, else /etc/<base>/<file>;
//  5. XDG: $XDG_CONFIG_HOME/<base>/<file> (the user's file), then each
//     directory of $XDG_CONFIG_DIRS (default /etc/xdg) as <dir>/<base>/<file>
//     in reverse order, so that /etc/xdg/mycroft/mycroft.conf beats the
//     user's file. Keys in system.protected_keys.user are removed here;
//  6. bus file: $OVOS_BUS_CONFIG_FILE, its websocket and logging sections
//     only (see below);
//  7. variables: the OVOS_BUS_* variables below, one layer each;
//  8. flags: those given on the command line (RegisterFlags).
//
// <base> is $OVOS_CONFIG_BASE_FOLDER (default mycroft), <file> is
// $OVOS_CONFIG_FILENAME (default mycroft.conf); XDG_CONFIG_HOME defaults to
// ~/.config, XDG_STATE_HOME to ~/.local/state, XDG_DATA_HOME to
// ~/.local/share. An empty variable counts as unset for all these paths.
//
// The `system` section is read only from layers 1, 3 and 4, deep-merged in
// that order: system.disable_remote_config skips layer 2,
// system.disable_user_config skips layer 5 (layers 6 to 8 are the operator's
// and always apply). protected_keys name nested keys as "a:b".
//
// # Files
//
// .yml and .yaml files are YAML; any other file is JSON in which a line
// whose first non-blank characters are // or # is a comment. An empty (or
// all-comment) file is an empty configuration. A missing file is skipped and
// listed as "not found" in Provenance.Layers. A repeated JSON key keeps its
// last value, as in Python.
//
// A file that cannot be read or parsed (a stray comma, a truncated file, a
// file the process may not read) is skipped, as ovos-config does, so that a
// typo in one file does not leave OVOS without a bus: Provenance.Broken lists
// it with its *Error (file:line:col and what is wrong), and the serve command
// logs it as an error and counts it in /health and /metrics. On a reload
// (LoadOptions.Previous) such a file keeps the version last read whole, as
// ovos-config's LocalConf keeps its keys when a reload fails. Strict mode
// makes such a file an error instead: LoadOptions.Strict, the flag
// --strict-config, or OVOS_BUS_STRICT_CONFIG=true (the flag wins over the
// variable). A value of the wrong type or out of range is an error in both
// modes, naming the file, line, key and what was expected: the file was read
// as its author wrote it, and skipping the whole file for one value would
// drop its other settings (auth among them) without a word.
//
// OVOS_BUS_CONFIG_FILE, which the Rust bus reads with a YAML parser whatever
// its name, is YAML when named .yml or .yaml, commented JSON when named
// .json or .conf, and otherwise JSON if its first non-comment character is
// '{', else YAML. Like the Rust bus, ovbus reads its `websocket` section (and
// also its `logging` section, for the log level); anything else in it is
// ignored, so it may be a whole mycroft.conf. A file holding websocket keys
// at the top level, outside a `websocket` object, is an error that says so.
// Unlike the Rust bus, a named file that does not exist is an error (a bad
// value of the variable); one that cannot be read or parsed is skipped like
// any file of the stack.
//
// # Keys
//
// The websocket section. "OVOS" keys are read by the other OVOS buses too;
// the others are ovbus's own. Seconds may be fractional (0.5) or written as
// a Go duration string ("500ms"). Numbers may be written as strings ("8181"),
// booleans as true/false, yes/no, on/off or 1/0. A key set to null takes its
// built-in value.
//
//	key                       default             variable / flag                     reload   meaning
//	host                      "127.0.0.1"         OVOS_BUS_HOST --host                restart  OVOS: bind address
//	port                      8181                OVOS_BUS_PORT --port                restart  OVOS: TCP port; 0 picks a free one
//	route                     "/core"             OVOS_BUS_ROUTE --route              restart  OVOS: exact URL path, starts with /
//	ssl                       false               OVOS_BUS_USE_SSL --ssl              restart  OVOS: serve wss:// on the same port
//	ssl_cert, ssl_key         unset               OVOS_BUS_SSL_CERT --ssl-cert,       restart  OVOS: PEM files; unless both are set a
//	                                              OVOS_BUS_SSL_KEY --ssl-key                   self-signed pair is made (EnsureCertificate)
//	max_msg_size              25 (10 if missing)  OVOS_BUS_MAX_MSG_SIZE --max-msg-size live     OVOS: largest frame, MiB (× 1024 × 1024
//	                                                                                           bytes), > 0, at most 4096; fractions allowed
//	max_inflight_bytes        83886080 (80 MiB)   OVOS_BUS_MAX_INFLIGHT_BYTES         restart  bytes all clients together may hold of
//	                                              --max-inflight-bytes                         messages being read; a message over
//	                                                                                           64 KiB past it closes its sender with
//	                                                                                           1013; at least max_msg_size. Unset, it
//	                                                                                           grows to 3 × max_msg_size when larger
//	filter                    false               OVOS_BUS_FILTER --filter            live     OVOS: one DEBUG line per message
//	filter_logs               ["gui.status.request", "gui.page.upload"]               live     OVOS: types left out of that line
//	                                              OVOS_BUS_FILTER_LOGS --filter-logs           (comma-separated in variable and flag)
//	shared_connection         true                -                                   live     OVOS: read by clients only
//	secret_key,               unset               -                                   -        OVOS: read by clients only; the bus
//	allow_unencrypted                                                                          relays encrypted frames untouched
//	max_queue_bytes           67108864 (64 MiB)   OVOS_BUS_MAX_QUEUE_BYTES            live     bytes queued for one client before it
//	                                              --max-queue-bytes                            is closed as too slow; at least
//	                                                                                           max_msg_size. Unset, it grows to
//	                                                                                           2 × max_msg_size when that is larger.
//	                                                                                           Counts the compressed copies made
//	                                                                                           for deflate clients too
//	max_queue_messages        100000              OVOS_BUS_MAX_QUEUE_MESSAGES         live     messages queued for one client before
//	                                              OVOS_BUS_MSG_BUFFER_CAPACITY                 it is closed as too slow (the Rust
//	                                              --max-queue-messages                         bus's message_buffer_capacity)
//	write_timeout             10                  OVOS_BUS_WRITE_TIMEOUT              live     seconds one write to a client may take
//	                                              --write-timeout                              before it is dropped (no close frame)
//	max_connections           0 (auto)            OVOS_BUS_MAX_CONNECTIONS            live     most clients at once; one more gets
//	                                              --max-connections                            HTTP 503 before the upgrade. 0: the
//	                                                                                           open-file limit (raised to its hard
//	                                                                                           limit at start) minus 64, or 10000
//	                                                                                           where it is unknown
//	send_buffer               262144 (256 KiB)    OVOS_BUS_SEND_BUFFER                live     kernel send buffer of each client
//	                                              --send-buffer                                (SO_SNDBUF; Linux books twice it),
//	                                                                                           4096 to 64 MiB; new connections
//	handshake_timeout         10                  OVOS_BUS_HANDSHAKE_TIMEOUT          restart  seconds a connection may take to
//	                                              --handshake-timeout                          complete the WebSocket upgrade
//	shutdown_timeout          5                   OVOS_BUS_SHUTDOWN_TIMEOUT           live     seconds SIGINT/SIGTERM may take, the
//	                                              --shutdown-timeout                           flush of the queues included; 0 drops
//	                                                                                           at once
//	close_frames_on_shutdown  false               OVOS_BUS_CLOSE_FRAMES_ON_SHUTDOWN   live     send 1001 close frames on shutdown;
//	                                              --close-frames-on-shutdown                   off because OVOS clients do not
//	                                                                                           reconnect after one (docs/protocol.md §8)
//	compression               true                OVOS_BUS_COMPRESSION --compression  restart  permessage-deflate for clients that
//	                                                                                           offer it
//	compression_context       4096                OVOS_BUS_COMPRESSION_CONTEXT        live     bytes of earlier messages a deflate
//	                                              --compression-context                        client's are compressed against (context
//	                                                                                           takeover, where it allows); 0 for none
//	metrics_address           "" (off)            OVOS_BUS_METRICS_ADDRESS            restart  host:port of a separate /metrics
//	                                              --metrics-address                            listener, e.g. "127.0.0.1:9181"
//	allowed_origins           [] (all)            OVOS_BUS_ALLOWED_ORIGINS            live     accepted Origin headers, '*' wildcard,
//	                                              --allowed-origins                            case-insensitive; requests without
//	                                                                                           Origin (non-browsers) always pass
//	auth                      loopback: all       -                                   live     who may connect and what each client
//	                          anyone: refuse                                                   may do, below
//	monitor_address           "" (off)            OVOS_BUS_MONITOR_ADDRESS            restart  host:port of the browser monitor
//	                                              --monitor-address                            (package monitor), e.g. "127.0.0.1:9182"
//	monitor_allow_remote      false               OVOS_BUS_MONITOR_ALLOW_REMOTE       restart  let monitor_address be a non-loopback
//	                                              --monitor-allow-remote                       address and answer any Host header
//	log_file                  $XDG_STATE_HOME/<base>/bus.log                          restart  rotating log file (50 MB × 3);
//	                                              OVOS_BUS_LOG_FILE --log-file                 "" disables it, null is the default
//	cluster.name              "ovbus"             OVOS_BUS_CLUSTER_NAME               restart  nodes with the same name form one bus
//	cluster.node_name         ""                  OVOS_BUS_CLUSTER_NODE_NAME          restart  this node's name, unique; "" is <hostname>-<port>
//	cluster.order             "total"             OVOS_BUS_CLUSTER_ORDER              restart  "total": one order for all; "sender": each
//	                                                                                           sender's order, lower latency (package cluster)
//	cluster.nats_url          ""                  OVOS_BUS_CLUSTER_NATS_URL           restart  comma-separated URLs of an existing NATS
//	cluster.user              unset               OVOS_BUS_CLUSTER_USER               restart  user name for nats_url
//	cluster.password          unset               OVOS_BUS_CLUSTER_PASSWORD           restart  its password (Print shows 4 characters of a
//	                                                                                           password or token)
//	cluster.token             unset               OVOS_BUS_CLUSTER_TOKEN              restart  token for nats_url
//	cluster.creds             unset               OVOS_BUS_CLUSTER_CREDS              restart  credentials file (JWT + nkey) for nats_url
//	cluster.tls_ca            unset               OVOS_BUS_CLUSTER_TLS_CA             restart  PEM CA that verifies nats_url's server
//	cluster.tls_cert          unset               OVOS_BUS_CLUSTER_TLS_CERT           restart  PEM client certificate for nats_url
//	cluster.tls_key           unset               OVOS_BUS_CLUSTER_TLS_KEY            restart  its PEM key
//	cluster.listen            ""                  OVOS_BUS_CLUSTER_LISTEN             restart  host:port the NATS inside ovbus takes
//	                                                                                           routes on (instead of nats_url)
//	cluster.routes            []                  OVOS_BUS_CLUSTER_ROUTES             restart  the other nodes' listen, nats://host:port
//	cluster.advertise         ""                  OVOS_BUS_CLUSTER_ADVERTISE          restart  host:port the others reach listen at (NAT,
//	                                                                                           proxy); "" for the address they see
//	cluster.route_token       unset               OVOS_BUS_CLUSTER_ROUTE_TOKEN        restart  secret listen requires of the other nodes
//	                                                                                           (the same on every node); unset: none
//	cluster.store_dir         ""                  OVOS_BUS_CLUSTER_STORE_DIR          restart  embedded JetStream's state; "" a temp dir
//	cluster.lead              false               OVOS_BUS_CLUSTER_LEAD               restart  this node asks to lead the stream (order
//	                                                                                           total): the node whose clients send most
//	cluster.replicas          0                   OVOS_BUS_CLUSTER_REPLICAS           restart  copies of the stream; 0: nodes in routes
//	                                                                                           plus this one, at most 3 (1 with nats_url)
//	cluster.stream_max_age    60                  OVOS_BUS_CLUSTER_STREAM_MAX_AGE     restart  seconds the stream keeps a frame
//	cluster.stream_max_bytes  0                   OVOS_BUS_CLUSTER_STREAM_MAX_BYTES   restart  bytes it keeps; 0: 64 MiB or 2 × max_msg_size
//	cluster.max_inflight      16384               OVOS_BUS_CLUSTER_MAX_INFLIGHT       restart  frames of this node not yet confirmed by
//	                                                                                           the stream (order total)
//
// The websocket.cluster keys (an object: "cluster": {"listen": ...}) run
// several nodes as one bus over NATS; they are off unless nats_url, listen or
// routes is set, exactly one of nats_url and listen/routes. Each
// cluster.<key> has the variable OVOS_BUS_CLUSTER_<KEY> and the flag
// --cluster-<key> (underscores as dashes): OVOS_BUS_CLUSTER_NATS_URL,
// --cluster-nats-url; routes is comma-separated in both. Package cluster/clusterconf owns
// their defaults and checks (clusterconf.Options), apart from NATS; config
// reads and prints them.
//
// Limits that are not keys (package bus owns them): request headers of at
// most 32 KiB (bus.MaxHeaderBytes; more gets HTTP 431); a shutdown that
// ends within shutdown_timeout, its flush stopping up to 1 s (a quarter at
// most) before to leave time for the close frames; slow-consumer close frames
// written within 2 s; a cut client's blocked write given a tenth of
// write_timeout more; a client half its queue bound behind that takes
// nothing for a tenth of write_timeout cut; 10 WARNING lines per kind per
// 10 s, then one "suppressed K similar warnings" line. What a slow client
// sees is in the README's "Limits".
//
// The log level is not in the websocket section: it is logging.bus.log_level,
// else logging.log_level, else INFO (DEBUG, INFO, WARNING, ERROR, CRITICAL;
// any case; WARN, FATAL and Python's numbers 10-50 are accepted), then
// OVOS_BUS_LOG_LEVEL and --log-level; it reloads live. A log_level inside the
// websocket section is ignored with a warning.
//
// Aliases: websocket.message_buffer_capacity (the Rust bus) is
// max_queue_messages, websocket.filter_ogs (a Tornado release's misspelling)
// is filter_logs; the proper name wins when a file sets both.
//
// Any other websocket key is ignored with a warning in Provenance.Warnings.
//
// # Variables
//
// The Rust bus's variables: OVOS_BUS_CONFIG_FILE, OVOS_BUS_HOST,
// OVOS_BUS_PORT, OVOS_BUS_ROUTE, OVOS_BUS_MAX_MSG_SIZE (MiB),
// OVOS_BUS_USE_SSL and OVOS_BUS_MSG_BUFFER_CAPACITY (= max_queue_messages;
// OVOS_BUS_MAX_QUEUE_MESSAGES wins when both are set), plus ovbus's in the
// table. Unlike the Rust bus, a value that cannot be used is an error rather
// than ignored, and OVOS_BUS_USE_SSL=false turns SSL off; OVOS_BUS_USE_SSL
// set to anything else, the empty string included, turns it on. For the other
// variables an empty value is a value: OVOS_BUS_LOG_FILE= turns the file off,
// OVOS_BUS_HOST= is an error.
//
// # Auth
//
//	"websocket": {
//	  "auth": {
//	    "permissions": {
//	      "satellite": {"emit": ["recognizer_loop:*", "ovos.session.sync"], "receive": ["*"],
//	                    "rate": 20, "burst": 40, "reply_routing": true},
//	      "guest":     {"emit": [], "receive": ["speak"]}
//	    },
//	    "loopback": "all",
//	    "networks": {"192.168.1.0/24": "satellite", "fd00:1::/64": "guest"},
//	    "anyone": "refuse",
//	    "tokens": {
//	      "3f9c...long random secret...": {"name": "kitchen", "permissions": "satellite"},
//	      "b71e...another secret...":     {"name": "skills", "emit": ["speak", "recognizer_loop:*"]}
//	    },
//	    "required": false
//	  }
//	}
//
// A client that shows a token gets that token's permissions; one showing a
// token the bus does not know is refused (401) from anywhere. A client that
// shows none gets those of where it connects from: a network of "networks"
// (CIDR prefixes or single addresses; they must not overlap, and none may
// hold 127.0.0.1 or ::1) its permission set; else a loopback address or a
// Unix socket "loopback" ("all" by default); else "anyone" ("refuse" by
// default). "required": true refuses every client without a token, loopback
// included (then required with no tokens is an error). Each rule names a
// permission set: "all" (every type both ways, no rate limit), "refuse"
// (HTTP 401), or one of "permissions". How a client shows its token, and
// what each rule means on the wire, is docs/protocol.md §1 and §3.
//
// A permission set, or a token's own permissions: "emit" lists the message
// types the client may send and "receive" those delivered to it (absent:
// every type, empty: none; '*' stands for any run of characters, see
// bus.MatchType; a frame without a type, such as an encrypted one, is
// matched as "", so only "*" lets it through); "rate" and "burst" limit the
// messages it may send per second and at once (0: no limit; burst defaults
// to one second's worth); "reply_routing" keeps other routed clients'
// private replies from it. A token may instead name a set with
// "permissions", and has a "name" that labels it in logs, the monitor and
// metrics (token:NAME) and by which reply routing knows it. A token is
// visible ASCII (letters, digits and -._~ travel in URLs as they are) of at
// most 512 bytes. Any other key under auth, a set or a token is an error, so
// that a misspelling cannot grant more than meant; so is a rule naming a
// set that does not exist. Errors name the file, the line and the key
// (websocket.auth.networks.10.0.0.0/8), never a token: Print shows names and
// the first 4 characters of each token, never a whole one.
//
// # Provenance
//
// Provenance.Source names the layer that set each key: "default (bundled)",
// "default /path", "remote /path", "distribution /path", "system /path",
// "user /path", "xdg /path", "bus-file /path", "env OVOS_BUS_PORT",
// "flag --port", or "built-in" when no layer set it. For log_level it adds
// which key it came from: "system /etc/mycroft/mycroft.conf
// (logging.bus.log_level)".
//
// The reload column is the bus's answer (each bus.Options field's tag) for
// the bus's keys and the key table's for the others; a test checks that this
// table agrees. Built-in values of the bus's keys are the bus's
// (bus.Defaults); config keeps no copy of them.
//
// # Adding a key
//
// Every key is one row of the key table (keys in keys.go), from which
// decoding, the variables, the flags and their help, provenance, the
// unknown-key warnings, Print and Diff are driven. A key the bus reads takes
// one field in bus.Options, tagged `ovbus:"name,live"` or
// `ovbus:"name,restart"` (its default goes in bus.Options.withDefaults, its
// checks in bus.Options.Validate), plus one row whose bus func points at the
// field:
//
//	{name: "max_peers", env: env1("OVOS_BUS_MAX_PEERS"), flag: "max-peers", kind: kindCount,
//		bus: func(o *bus.Options) any { return &o.MaxPeers }, doc: "peers a node accepts"},
//
// A key only config or the serve command reads gets a Config field and a
// row with own and reload instead. Then add a line to the table above.
// TestKeysReachTheBus and TestEveryBusOptionHasAKey check the wiring.
//
// # Reload
//
// Load again on SIGHUP, with LoadOptions.Previous set to the provenance of
// the configuration in force, and call running.Reload(next): it returns the
// configuration in force afterwards (restart keys keep their running
// values) and what Diff says changed, live and needing a restart. Pass the
// result's Options to bus.Server.Apply, which applies the live keys.
package config
