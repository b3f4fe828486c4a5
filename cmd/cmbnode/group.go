package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cmbnode/cmbnode/cmb"
	"github.com/cmbnode/cmbnode/group"
	"github.com/cmbnode/cmbnode/node/config"
	"github.com/cmbnode/cmbnode/node/daemon"
	"github.com/cmbnode/cmbnode/node/groupkey"
	"github.com/cmbnode/cmbnode/node/identity"
	"github.com/cmbnode/cmbnode/node/ipc"
)

// Private groups: create, rotate and show a group's secret, print an
// invite, join with one. The secret lives in the home (groups/<name>/,
// mode 0600) and is printed only inside an invite, which is the point of
// an invite; nothing here logs it.

func cmdGroup(e *env, args []string) error {
	return subcommand(e, args, e.stdout, "subcommand", "create, rotate or show", `Usage: cmbnode group <create|rotate|show> [flags]

  create NAME  make private group NAME with a new random secret in this home
  rotate       add a new secret epoch to this home's group and print its invite
  show         the group's name, whether it is private, and its epochs (never the secret)`,
		map[string]func(*env, []string) error{"create": groupCreate, "rotate": groupRotate, "show": groupShow})
}

// homeConfig resolves the home (made, mode 0700, if mkdir) and reads its
// config, the defaults when there is none (exists false).
func homeConfig(flagValue string, mkdir bool) (home string, c config.Config, exists bool, err error) {
	if home, err = resolveHome(flagValue); err != nil {
		return "", c, false, err
	}
	if mkdir {
		if err := os.MkdirAll(home, 0o700); err != nil {
			return "", c, false, err
		}
	}
	_, err = os.Stat(config.Path(home))
	exists = err == nil
	c, err = config.Load(home)
	return home, c, exists, err
}

func groupCreate(e *env, args []string) error {
	fs := newFlags(e, "group create", "group create NAME [--home DIR]")
	home := homeFlag(fs)
	rest, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usagef("name the group: cmbnode group create NAME")
	}
	name := rest[0]
	if err := group.Validate(name); err != nil {
		return usagef("%v", err)
	}
	h, c, exists, err := homeConfig(*home, true)
	if err != nil {
		return err
	}
	g, err := groupkey.Create(h, name, time.Now())
	if err != nil {
		return groupErr(err, h)
	}
	fmt.Fprintf(e.stdout, "created private group %s (epoch %d); its secret is in %s\n", name, g.Epochs[0].N, groupkey.Dir(h, name))
	switch {
	case !exists:
		c.Group = name
		if err := config.Write(h, c); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "wrote %s for group %s; start with: cmbnode daemon --home %s\n", config.Path(h), name, h)
	case c.Group != name:
		fmt.Fprintf(e.stdout, "%s names group %s: set group = %q there to use %s\n", config.Path(h), c.Group, name, name)
	}
	fmt.Fprintln(e.stdout, "invite others with: cmbnode invite")
	return nil
}

func groupRotate(e *env, args []string) error {
	h, c, expires, addrs, err := inviteCmd(e, "group rotate", args)
	if err != nil {
		return err
	}
	g, ep, err := groupkey.Rotate(h, c.Group, time.Now())
	if err != nil {
		return groupErr(err, h)
	}
	line, err := makeInvite(e, h, g, ep, expires, addrs)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "rotated group %s to epoch %d. Members join the new epoch with the invite below; "+
		"nodes holding only the old secret are refused %s from now (rotation_grace). A running daemon here moves to it within seconds.\n",
		c.Group, ep.N, c.RotationGrace.Duration)
	fmt.Fprintln(e.stdout, line)
	return nil
}

func groupShow(e *env, args []string) error {
	fs := newFlags(e, "group show", "group show [--home DIR]")
	home := homeFlag(fs)
	if err := e.parseNone(fs, args); err != nil {
		return err
	}
	h, c, _, err := homeConfig(*home, false)
	if err != nil {
		return err
	}
	if c.Public {
		fmt.Fprintf(e.stdout, "group %s: public (name-only: anyone who knows the name can join and read)\n", c.Group)
		return nil
	}
	g, err := groupkey.LoadGroup(h, c.Group)
	if errors.Is(err, groupkey.ErrNoSecret) {
		fmt.Fprintf(e.stdout, "group %s: private, no secret yet (the daemon makes one on first start)\n", c.Group)
		return nil
	}
	if err != nil {
		return groupErr(err, h)
	}
	fmt.Fprintf(e.stdout, "group %s: private, wire tag %s, rotation grace %s\n", c.Group, groupkey.Tag(g.ID), c.RotationGrace.Duration)
	for _, ep := range g.Epochs {
		fmt.Fprintf(e.stdout, "  epoch %d  created %s\n", ep.N, ep.Created.UTC().Format(time.RFC3339))
	}
	return nil
}

// inviteCmd parses the flags of the commands that print an invite (name:
// group rotate, invite) and resolves the home, whose config must name a
// private group.
func inviteCmd(e *env, name string, args []string) (h string, c config.Config, expires time.Duration, addrs []string, err error) {
	fs := newFlags(e, name, name+" [--home DIR] [--expires DURATION] [--addr MADDR]…")
	home := homeFlag(fs)
	exp := fs.Duration("expires", 0, "the invite expires after this, e.g. 24h (0: never; an expiry guards against stale pastes, it revokes nothing)")
	fs.Var((*listFlag)(&addrs), "addr", "a dialable multiaddr with /p2p/ to put in the invite (repeatable; default: the running daemon's)")
	if err := e.parseNone(fs, args); err != nil {
		return "", c, 0, nil, err
	}
	if h, c, _, err = homeConfig(*home, false); err != nil {
		return "", c, 0, nil, err
	}
	if c.Public {
		return "", c, 0, nil, fmt.Errorf("group %s is public (public = true in %s): a public group has no secret to share", c.Group, config.Path(h))
	}
	return h, c, *exp, addrs, nil
}

func cmdInvite(e *env, args []string) error {
	h, c, expires, addrs, err := inviteCmd(e, "invite", args)
	if err != nil {
		return err
	}
	g, err := groupkey.LoadGroup(h, c.Group)
	if errors.Is(err, groupkey.ErrNoSecret) {
		return fmt.Errorf("group %s has no secret yet in %s; create it with `cmbnode group create %s` or start the daemon once", c.Group, h, c.Group)
	}
	if err != nil {
		return groupErr(err, h)
	}
	line, err := makeInvite(e, h, g, g.Epochs[len(g.Epochs)-1], expires, addrs)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, line)
	return nil
}

// makeInvite builds the invite line for epoch ep of g, with addrs, or the
// running daemon's addresses (loopback ones only when there are no others).
func makeInvite(e *env, home string, g groupkey.Group, ep groupkey.Epoch, expires time.Duration, addrs []string) (string, error) {
	if expires < 0 {
		return "", usagef("--expires must not be negative")
	}
	if len(addrs) == 0 {
		addrs = daemonAddrs(e, home)
		if len(addrs) == 0 {
			fmt.Fprintln(e.stderr, "cmbnode: no daemon is running here, so the invite names no address; the joiner needs --bootstrap, mDNS, or an invite made while the daemon runs (or with --addr)")
		}
	}
	inv := groupkey.Invite{Group: g.Name, ID: g.ID, Epoch: ep, Addrs: addrs}
	// The inviter's nodeId and key: the joiner pins them before it first
	// connects, so no member can claim this node's nodeId to it first.
	if id, err := identity.Load(home); err == nil {
		inv.InviterNodeID, inv.InviterKey = id.NodeID, id.Ed25519.Public().(ed25519.PublicKey)
	}
	if expires > 0 {
		inv.Expires = time.Now().Add(expires)
	}
	return inv.String(), nil
}

func daemonAddrs(e *env, home string) []string {
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	st, err := ipc.StatusAt(ctx, daemon.SocketPath(home))
	if err != nil {
		return nil
	}
	var public, loop []string
	for _, a := range st.Addrs {
		if strings.HasPrefix(a, "/ip4/127.") || strings.HasPrefix(a, "/ip6/::1/") {
			loop = append(loop, a)
		} else {
			public = append(public, a)
		}
	}
	if len(public) == 0 {
		public = loop
	}
	return public[:min(len(public), 8)]
}

func cmdJoin(e *env, args []string) error {
	fs := newFlags(e, "join", "join INVITE [--home DIR] [--replace]")
	home := homeFlag(fs)
	replace := fs.Bool("replace", false, "replace another private group of the same name held in this home (its records are then shared with the new group)")
	rest, err := e.parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usagef("give the invite line: cmbnode join INVITE")
	}
	inv, err := groupkey.ParseInvite(rest[0], time.Now())
	if err != nil {
		return err // one line naming what is wrong
	}
	h, c, exists, err := homeConfig(*home, true)
	if err != nil {
		return err
	}
	if exists {
		if err := inv.ForGroup(c.Group); err != nil {
			return fmt.Errorf("%w; set group = %q in %s to switch, or join with a fresh --home", err, inv.Group, config.Path(h))
		}
		if c.Public {
			return fmt.Errorf("this home's group %s is public (public = true in %s); set public = false to join the private group", c.Group, config.Path(h))
		}
	}
	added, err := groupkey.Join(h, inv.Group, inv.ID, inv.Epoch, *replace)
	if err != nil {
		return groupErr(err, h)
	}
	if !exists {
		c.Group, c.Bootstrap = inv.Group, inv.Addrs
		// An inviter behind a NAT advertises addresses through its relays:
		// those relays become the joiner's static relays.
		c.Relays = relaysOf(inv.Addrs)
		if err := config.Write(h, c); err != nil {
			return err
		}
	}
	if inv.InviterNodeID != "" {
		if err := pinInviter(e, h, inv); err != nil {
			return err
		}
	}
	switch {
	case !added:
		fmt.Fprintf(e.stdout, "this home already holds epoch %d of group %s\n", inv.Epoch.N, inv.Group)
	case daemonAddrs(e, h) != nil:
		fmt.Fprintf(e.stdout, "joined group %s at epoch %d; the running daemon moves to it within seconds\n", inv.Group, inv.Epoch.N)
	default:
		fmt.Fprintf(e.stdout, "joined group %s at epoch %d; start with: cmbnode daemon --home %s\n", inv.Group, inv.Epoch.N, h)
	}
	return nil
}

// groupErr words a groupkey error for a person.
func groupErr(err error, home string) error {
	switch {
	case errors.Is(err, groupkey.ErrOtherGroup):
		return fmt.Errorf("%w; this home is in another private group of that name: join with a fresh --home, or pass --replace to join (its records are then shared with the new group)", err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w; check the owner and mode of %s", err, home)
	}
	return err
}

// pinInviter pins the inviter's key for its nodeId, as the operator's
// choice (confirmed and trusted), before the first connection: through the
// running daemon, or in the store when none runs.
func pinInviter(e *env, home string, inv groupkey.Invite) error {
	key := ed25519.PublicKey(inv.InviterKey)
	c, err := ipc.Dial(e.ctx, daemon.SocketPath(home))
	switch {
	case err == nil:
		defer c.Close()
		_, err := c.Call(e.ctx, ipc.TypeTrust, map[string]any{"nodeId": inv.InviterNodeID, "key": cmb.EncodeKey(key)})
		if err != nil {
			return fmt.Errorf("pinning the inviter %s: %w", inv.InviterNodeID, daemonErr(err))
		}
		return nil
	case errors.Is(err, ipc.ErrNoDaemon):
		if err := daemon.TrustOffline(e.ctx, home, inv.InviterNodeID, key); err != nil {
			return fmt.Errorf("pinning the inviter %s: %w", inv.InviterNodeID, withFix(err))
		}
		return nil
	}
	return err
}

// relaysOf are the relays named by circuit addresses among addrs
// (".../p2p/<relay>/p2p-circuit/p2p/<peer>" gives ".../p2p/<relay>"), once
// each.
func relaysOf(addrs []string) []string {
	out := []string{}
	for _, a := range addrs {
		relay, _, ok := strings.Cut(a, "/p2p-circuit")
		if ok && strings.Contains(relay, "/p2p/") && !slices.Contains(out, relay) {
			out = append(out, relay)
		}
	}
	return out
}
