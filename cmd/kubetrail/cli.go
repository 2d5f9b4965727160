package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// command is one subcommand's command line as kubectl shapes its own: POSIX flags (pflag,
// kubectl's flag package: --long, -s, -s VALUE, --long=VALUE), flags and arguments in any
// order, and a help of a description, examples, options in groups and the usage line.
type command struct {
	name        string // as the user typed it: "kubectl trail", "kubetrail trace"
	short       string // the description's first line
	long        string // more description, may be empty
	examples    string // "  # comment\n  command …" blocks, without the "Examples:" heading
	usage       string // the usage line after the name
	fs          *pflag.FlagSet
	groups      []flagGroup
	help        bool
	groupByFlag map[string]string
}

// flagGroup is one heading of the help's options.
type flagGroup struct {
	title string
	names []string
}

func newCommand(name, short, long, examples, usage string) *command {
	c := &command{name: name, short: short, long: long, examples: examples, usage: usage,
		fs: pflag.NewFlagSet(name, pflag.ContinueOnError), groupByFlag: map[string]string{}}
	c.fs.SetOutput(io.Discard) // errors are returned, help is printed by help()
	c.fs.SortFlags = false
	return c
}

// group starts a heading of the help: the flags add defines are listed under it, in that order.
func (c *command) group(title string, add func(fs *pflag.FlagSet)) {
	before := map[string]bool{}
	c.fs.VisitAll(func(f *pflag.Flag) { before[f.Name] = true })
	add(c.fs)
	g := flagGroup{title: title}
	c.fs.VisitAll(func(f *pflag.Flag) {
		if !before[f.Name] {
			g.names = append(g.names, f.Name)
		}
	})
	c.groups = append(c.groups, g)
}

// finish adds the flags every command has, last in the help.
func (c *command) finish() {
	if c.fs.Lookup("help") == nil {
		c.group("General", func(fs *pflag.FlagSet) {
			fs.BoolVarP(&c.help, "help", "h", false, "Show this help.")
		})
	}
}

// flagWords are the command's flags as typed (--long, -s), in the help's order, and those of
// them that take a value; for shell completion.
func (c *command) flagWords() (all, valued []string) {
	c.finish()
	c.fs.VisitAll(func(f *pflag.Flag) {
		words := []string{"--" + f.Name}
		if f.Shorthand != "" {
			words = append(words, "-"+f.Shorthand)
		}
		all = append(all, words...)
		if f.Value.Type() != "bool" {
			valued = append(valued, words...)
		}
	})
	return all, valued
}

// parse reads args and returns the positional arguments; errHelp when help was asked for (and
// written to stdout, as kubectl does).
func (c *command) parse(args []string, stdout io.Writer) ([]string, error) {
	c.finish()
	if err := c.singleDash(args); err != nil {
		return nil, err
	}
	if err := c.fs.Parse(args); err != nil {
		return nil, usageError{err}
	}
	if c.help {
		c.writeHelp(stdout)
		return nil, errHelp
	}
	pos := c.fs.Args()
	if pos == nil {
		pos = []string{}
	}
	return pos, nil
}

// singleDash refuses a long flag written with one dash (-generation), which the Go flag
// package took and kubectl does not: pflag would read it as the shorthands -g -e -n …, and
// the message would not say what to type instead.
func (c *command) singleDash(args []string) error {
	for _, a := range args {
		if a == "--" {
			return nil
		}
		if len(a) < 3 || a[0] != '-' || a[1] == '-' {
			continue
		}
		name, _, _ := strings.Cut(a[1:], "=")
		if f := c.fs.Lookup(name); f != nil && len(name) > 1 { // -v=1 is the shorthand of --v
			return usagef("%s: a long flag takes two dashes, as in kubectl: --%s", a, a[1:])
		}
	}
	return nil
}

// writeHelp writes the help in kubectl's layout: description, Examples, Options (grouped),
// Usage.
func (c *command) writeHelp(w io.Writer) {
	var b strings.Builder
	b.WriteString(c.short + "\n")
	if c.long != "" {
		b.WriteString("\n" + c.long + "\n")
	}
	if c.examples != "" {
		b.WriteString("\nExamples:\n" + strings.TrimRight(c.examples, "\n") + "\n")
	}
	b.WriteString("\nOptions:\n")
	for _, g := range c.groups {
		b.WriteString("  " + g.title + ":\n")
		for _, name := range g.names {
			writeFlag(&b, c.fs.Lookup(name))
		}
	}
	b.WriteString("Usage:\n  " + c.name + " " + c.usage + "\n")
	_, _ = io.WriteString(w, b.String())
}

// writeFlag writes one flag as kubectl does ("-o, --output='tree':") and the text on its own
// lines, indented by a tab.
func writeFlag(b *strings.Builder, f *pflag.Flag) {
	b.WriteString("    ")
	if f.Shorthand != "" {
		b.WriteString("-" + f.Shorthand + ", ")
	}
	def := f.DefValue
	if f.Value.Type() == "string" {
		def = "'" + def + "'"
	}
	b.WriteString("--" + f.Name + "=" + def + ":\n")
	for _, line := range wrap(f.Usage, 96) {
		b.WriteString("\t" + line + "\n")
	}
	b.WriteString("\n")
}

// wrap breaks s into lines of at most width characters, at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return append(lines, line)
}

// objectArg reads the object of a command line: TYPE/NAME or TYPE NAME, as kubectl takes them.
func objectArg(pos []string, cmd string) (kind, name string, err error) {
	switch len(pos) {
	case 1:
		kind, name, ok := strings.Cut(pos[0], "/")
		if !ok || kind == "" || name == "" || strings.Contains(name, "/") {
			return "", "", usagef("%q: want TYPE/NAME or TYPE NAME, e.g. deployment/web or deploy web", pos[0])
		}
		return kind, name, nil
	case 2:
		if strings.Contains(pos[0], "/") {
			break // two objects
		}
		if strings.Contains(pos[1], "/") || pos[0] == "" || pos[1] == "" {
			return "", "", usagef("%q %q: want TYPE/NAME or TYPE NAME, e.g. deployment/web or deploy web", pos[0], pos[1])
		}
		return pos[0], pos[1], nil
	case 0:
		return "", "", usagef("%s takes one object, TYPE/NAME or TYPE NAME, e.g. deploy/web", cmd)
	}
	return "", "", usagef("%s takes one object, TYPE/NAME or TYPE NAME, e.g. deploy/web (got %d arguments: %s)", cmd, len(pos), strings.Join(pos, " "))
}

// errHelp is returned by a command line that asked for help, once it is written: exit 0.
var errHelp = errors.New("help")

// usageError is a mistake in the command line.
type usageError struct{ error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// hint is kubectl's line after a usage error.
func hint(cmd string) string {
	return fmt.Sprintf("See '%s -h' for help and examples.\n", cmd)
}
