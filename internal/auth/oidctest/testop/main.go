// Command testop runs oidctest's OpenID Connect provider as its own process
// on a loopback port, for tests that are not Go (the web UI's browser
// tests). It prints one JSON line {"issuer": URL} on stdout once serving,
// and stops on SIGINT/SIGTERM or when stdin closes (so it dies with the
// test that started it).
//
//	testop --client agentd-web=http://127.0.0.1:8080/auth/callback \
//	       --user erin:pw-erin:sub-erin:Erin\ Example [--id-token-ttl 1h] \
//	       [--refresh-token-ttl 0]
//
// Refresh tokens are issued when the client asks for the offline_access
// scope; they expire after --refresh-token-ttl (0: never).
//
// It is test support: nothing in the agentd binary imports it.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/agentd/agentd/internal/auth/oidctest"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "testop:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("testop", flag.ContinueOnError)
	var clients, users list
	fs.Var(&clients, "client", "a public client: ID=REDIRECT_URI[,REDIRECT_URI…] (repeatable)")
	fs.Var(&users, "user", "a user: USERNAME:PASSWORD:SUBJECT[:DISPLAY NAME] (repeatable)")
	ttl := fs.Duration("id-token-ttl", time.Hour, "how long ID tokens live")
	refreshTTL := fs.Duration("refresh-token-ttl", 0, "how long refresh tokens live (0: no limit)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(clients) == 0 || len(users) == 0 {
		return errors.New("at least one --client and one --user are needed")
	}
	p, err := oidctest.Start()
	if err != nil {
		return err
	}
	defer p.Close()
	p.SetRefreshTokenLifetime(*refreshTTL)
	for _, c := range clients {
		id, redirects, ok := strings.Cut(c, "=")
		if !ok || id == "" || redirects == "" {
			return fmt.Errorf("--client %q: want ID=REDIRECT_URI", c)
		}
		p.AddClient(id, *ttl, strings.Split(redirects, ",")...)
	}
	for _, u := range users {
		f := strings.SplitN(u, ":", 4)
		if len(f) < 3 || f[0] == "" || f[2] == "" {
			return fmt.Errorf("--user %q: want USERNAME:PASSWORD:SUBJECT[:NAME]", u)
		}
		user := oidctest.User{Username: f[0], Password: f[1], Subject: f[2], Email: f[0] + "@example.test"}
		if len(f) == 4 {
			user.Name = f[3]
		}
		p.AddUser(user)
	}
	if err := json.NewEncoder(os.Stdout).Encode(map[string]string{"issuer": p.URL}); err != nil {
		return err
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-stop:
	case <-eof:
	}
	return nil
}
