// Package routerctl is the control protocol between harness/anchor
// -routers 2 (the host) and harness/anchor/router (the agent in each
// emulated router): one JSON object a line each way, a Request and then
// its Answer, over one TCP connection on the router's LAN address.
//
//	{"op":"sh","cmd":"..."}                       run /bin/sh -c; out
//	{"op":"start","id":"x","argv":[...],"env":[]} start a background process
//	{"op":"stop","id":"x"}                        SIGTERM it, wait; out
//	{"op":"write","path":"...","data":"<base64>"} write a file
//	{"op":"read","path":"..."}                    data
//	{"op":"clock","watch":true}                   mono_ns; watch arms the stall watch
//	{"op":"unwatch"}                              kicks the stall watch wrote
//	{"op":"quit"}                                 stop every process, exit 0
//
// Answers: {"ok":true,...} or {"ok":false,"err":"...","out":"..."}.
package routerctl

// Request is one host request.
type Request struct {
	Op    string   `json:"op"`
	Cmd   string   `json:"cmd,omitempty"`
	ID    string   `json:"id,omitempty"`
	Argv  []string `json:"argv,omitempty"`
	Env   []string `json:"env,omitempty"`
	Path  string   `json:"path,omitempty"`
	Data  []byte   `json:"data,omitempty"`
	Watch bool     `json:"watch,omitempty"`
}

// Answer is the agent's answer to one Request.
type Answer struct {
	OK     bool   `json:"ok"`
	Err    string `json:"err,omitempty"`
	Out    string `json:"out,omitempty"`
	Data   []byte `json:"data,omitempty"`
	MonoNS int64  `json:"mono_ns,omitempty"` // the agent's monotonic clock, ns since it started
	Kicks  int    `json:"kicks,omitempty"`
}
