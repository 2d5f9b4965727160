package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/kubetrail/kubetrail/cmd/kubetrail/internal/trail"
)

// subcommands are the words after the program; as a kubectl plugin an object there is trace's.
var subcommands = []string{"trace", "changes", "show", "serve", "annotate", "apply", "completion", "config"}

// completeProg is progName's answer for kubectl_complete-trail: the executable kubectl (1.26
// and later) runs to complete `kubectl trail …`, with the words after "trail", the last one
// the word being completed.
const completeProg = "kubectl_complete"

// valueWords are what completes the value of a flag; files means the shell's file names.
var valueWords = map[string][]string{
	"output": outputs,
	"only":   trail.ValidOnly,
	"source": {"jaeger=", "file="},
}

// outputsOf are the values of -o of a command (trace's for the others, which have none).
var outputsOf = map[string][]string{"changes": changesOutputs, "show": showOutputs}

var fileFlags = []string{"kubeconfig", "out", "filename", "f"}

// words are the completions' vocabulary, from the commands' own flag sets: a new flag is
// completed without editing the scripts.
type words struct {
	traceFlags, changesFlags, showFlags []string
	serveFlags                          []string
	annotateFlags, applyFlags           []string
	configFlags                         []string
	valued                              []string // flags that take a value
	kinds                               []string
}

func vocabulary() words {
	var w words
	var tvalued, chvalued, svalued, avalued, pvalued []string
	w.traceFlags, tvalued = traceCommand("", &traceFlags{}).flagWords()
	w.changesFlags, chvalued = changesCommand("", &changesFlags{}).flagWords()
	w.showFlags, svalued = showCommand("", &showFlags{}).flagWords()
	var vvalued []string
	w.serveFlags, vvalued = serveCommand("", &serveFlags{}).flagWords()
	w.annotateFlags, avalued = annotateCommand("", &kubeFlags{}).flagWords()
	w.applyFlags, pvalued = applyCommand("", &applyFlags{}).flagWords()
	var cvalued []string
	w.configFlags, cvalued = configCommand("", &configFlags{}).flagWords()
	for _, f := range slices.Concat(tvalued, chvalued, svalued, vvalued, avalued, pvalued, cvalued) {
		if !slices.Contains(w.valued, f) {
			w.valued = append(w.valued, f)
		}
	}
	// The kinds people trace: kubectl's short names and their resources, and the owners'.
	seen := map[string]bool{}
	for short, resource := range trail.ShortNames() {
		seen[short], seen[resource] = true, true
	}
	for _, r := range []string{"jobs", "secrets", "leases", "endpointslices", "roles", "rolebindings", "clusterroles", "clusterrolebindings"} {
		seen[r] = true
	}
	for k := range seen {
		w.kinds = append(w.kinds, k)
	}
	slices.Sort(w.kinds)
	return w
}

// runCompletion is `kubetrail completion bash|zsh`.
func runCompletion(prog, cmd string, args []string, stdout io.Writer) error {
	c := newCommand(cmd, "Output shell completion code for bash or zsh: subcommands, flags, the values of -o, --only and\n--source, and kinds.",
		`The script completes kubetrail and kubectl-trail. kubectl (1.26 and later) completes "kubectl trail" itself by
running kubectl_complete-trail from the PATH: make it a link to kubectl-trail (docs/cli.md).`,
		fmt.Sprintf(`  # Load the completion into the current bash shell, and into every new one
  source <(%[1]s bash)
  echo 'source <(%[1]s bash)' >> ~/.bashrc

  # zsh
  source <(%[1]s zsh)

  # kubectl trail <TAB>, next to kubectl-trail
  ln -s kubectl-trail "$(dirname "$(command -v kubectl-trail)")/kubectl_complete-trail"
`, cmd), "(bash | zsh)")
	pos, err := c.parse(args, stdout)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("%s takes one shell, bash or zsh", cmd)
	}
	w := vocabulary()
	var script string
	switch pos[0] {
	case "bash":
		script = bashCompletion
	case "zsh":
		script = zshCompletion
	default:
		return usagef("%s %q: want bash or zsh", cmd, pos[0])
	}
	r := strings.NewReplacer(
		"@PROG@", prog,
		"@SUBCOMMANDS@", strings.Join(subcommands, " "),
		"@TRACE_FLAGS@", strings.Join(w.traceFlags, " "),
		"@CHANGES_FLAGS@", strings.Join(w.changesFlags, " "),
		"@SHOW_FLAGS@", strings.Join(w.showFlags, " "),
		"@SERVE_FLAGS@", strings.Join(w.serveFlags, " "),
		"@SUBCOMMAND_PATTERN@", strings.Join(subcommands, "|"),
		"@ANNOTATE_FLAGS@", strings.Join(w.annotateFlags, " "),
		"@APPLY_FLAGS@", strings.Join(w.applyFlags, " "),
		"@CONFIG_FLAGS@", strings.Join(w.configFlags, " "),
		"@CONFIG_VERBS@", strings.Join(configVerbs, " "),
		"@CONFIG_KEYS@", strings.Join(configKeys, " "),
		"@VALUED@", strings.Join(w.valued, "|"),
		"@KINDS@", strings.Join(w.kinds, " "),
		"@OUTPUTS@", strings.Join(outputs, " "),
		"@CHANGES_OUTPUTS@", strings.Join(changesOutputs, " "),
		"@SHOW_OUTPUTS@", strings.Join(showOutputs, " "),
		"@ONLY@", strings.Join(trail.ValidOnly, " "),
		"@SOURCES@", strings.Join(valueWords["source"], " "),
		"@FILE_FLAGS@", fileFlagWords(),
	)
	_, err = io.WriteString(stdout, r.Replace(script))
	return err
}

// bashCompletion completes by the word before the cursor (a flag's value), the flag sets, the
// subcommand and the kinds. bash splits --output=json at '=' (COMP_WORDBREAKS), so the word
// before a value may be '='.
const bashCompletion = `# bash completion for kubetrail and kubectl-trail; load it with
#   source <(@PROG@ completion bash)
# kubectl (1.26 and later) completes "kubectl trail" by running kubectl_complete-trail: see
# "@PROG@ completion --help".
_kubetrail() {
    local cur prev cmd i
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    if [[ $cur == = ]]; then
        cur=
    elif [[ $prev == = ]] && ((COMP_CWORD >= 2)); then
        prev=${COMP_WORDS[COMP_CWORD-2]}
    fi
    COMPREPLY=()
    cmd=
    case ${COMP_WORDS[1]} in
        @SUBCOMMAND_PATTERN@) ((COMP_CWORD > 1)) && cmd=${COMP_WORDS[1]} ;;
    esac
    if [[ -z $cmd && ${COMP_WORDS[0]##*/} == kubectl-trail ]]; then
        cmd=trace # as a kubectl plugin, an object is trace's
    fi
    case $prev in
        -o|--output)
            case $cmd in
                changes) COMPREPLY=($(compgen -W "@CHANGES_OUTPUTS@" -- "$cur")) ;;
                show) COMPREPLY=($(compgen -W "@SHOW_OUTPUTS@" -- "$cur")) ;;
                *) COMPREPLY=($(compgen -W "@OUTPUTS@" -- "$cur")) ;;
            esac
            return ;;
        --only) COMPREPLY=($(compgen -W "@ONLY@" -- "$cur")); return ;;
        --source) COMPREPLY=($(compgen -W "@SOURCES@" -- "$cur")); compopt -o nospace; return ;;
        @FILE_FLAGS@) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        @VALUED@) return ;;
    esac
    if [[ $cur == -* ]]; then
        case $cmd in
            trace) COMPREPLY=($(compgen -W "@TRACE_FLAGS@" -- "$cur")) ;;
            changes) COMPREPLY=($(compgen -W "@CHANGES_FLAGS@" -- "$cur")) ;;
            show) COMPREPLY=($(compgen -W "@SHOW_FLAGS@" -- "$cur")) ;;
            serve) COMPREPLY=($(compgen -W "@SERVE_FLAGS@" -- "$cur")) ;;
            annotate) COMPREPLY=($(compgen -W "@ANNOTATE_FLAGS@" -- "$cur")) ;;
            apply) COMPREPLY=($(compgen -W "@APPLY_FLAGS@" -- "$cur")) ;;
            config) COMPREPLY=($(compgen -W "@CONFIG_FLAGS@" -- "$cur")) ;;
            *) COMPREPLY=($(compgen -W "--help -h" -- "$cur")) ;;
        esac
        return
    fi
    if ((COMP_CWORD == 1)); then
        COMPREPLY=($(compgen -W "@SUBCOMMANDS@" -- "$cur"))
        [[ $cmd == trace ]] && COMPREPLY+=($(compgen -W "@KINDS@" -- "$cur"))
        return
    fi
    case $cmd in
        completion) COMPREPLY=($(compgen -W "bash zsh" -- "$cur")) ;;
        config)
            case $prev in
                config) COMPREPLY=($(compgen -W "@CONFIG_VERBS@" -- "$cur")) ;;
                get|set|unset) COMPREPLY=($(compgen -W "@CONFIG_KEYS@" -- "$cur")) ;;
            esac ;;
        apply) ;; # flags only: its files follow -f
        trace|changes|show|annotate)
            # TYPE, unless one was given: the first word that is neither a flag nor its value.
            for ((i = 1; i < COMP_CWORD; i++)); do
                case ${COMP_WORDS[i]} in
                    trace|changes|show|annotate) ((i == 1)) && continue ;;
                    =) continue ;;
                    @VALUED@) ((i++)); continue ;;
                    -*) continue ;;
                esac
                [[ ${COMP_WORDS[i-1]} == = ]] && continue
                return
            done
            COMPREPLY=($(compgen -W "@KINDS@" -- "$cur")) ;;
    esac
}
complete -F _kubetrail kubetrail kubectl-trail
`

// zshCompletion is the same completion in zsh's own terms (no bashcompinit).
const zshCompletion = `#compdef kubetrail kubectl-trail
# zsh completion for kubetrail and kubectl-trail; load it with
#   source <(@PROG@ completion zsh)
_kubetrail() {
    local cur=${words[CURRENT]} prev=${words[CURRENT-1]} cmd=
    case ${words[2]} in
        @SUBCOMMAND_PATTERN@) ((CURRENT > 2)) && cmd=${words[2]} ;;
    esac
    [[ -z $cmd && ${words[1]:t} == kubectl-trail ]] && cmd=trace
    case $prev in
        -o|--output)
            case $cmd in
                changes) compadd -- @CHANGES_OUTPUTS@ ;;
                show) compadd -- @SHOW_OUTPUTS@ ;;
                *) compadd -- @OUTPUTS@ ;;
            esac
            return ;;
        --only) compadd -- @ONLY@; return ;;
        --source) compadd -S '' -- @SOURCES@; return ;;
        @FILE_FLAGS@) _files; return ;;
        @VALUED@) return ;;
    esac
    if [[ $cur == -* ]]; then
        case $cmd in
            trace) compadd -- @TRACE_FLAGS@ ;;
            changes) compadd -- @CHANGES_FLAGS@ ;;
            show) compadd -- @SHOW_FLAGS@ ;;
            serve) compadd -- @SERVE_FLAGS@ ;;
            annotate) compadd -- @ANNOTATE_FLAGS@ ;;
            apply) compadd -- @APPLY_FLAGS@ ;;
            config) compadd -- @CONFIG_FLAGS@ ;;
            *) compadd -- --help -h ;;
        esac
        return
    fi
    if ((CURRENT == 2)); then
        compadd -- @SUBCOMMANDS@
        [[ $cmd == trace ]] && compadd -- @KINDS@
        return
    fi
    case $cmd in
        completion) compadd -- bash zsh ;;
        config)
            case $prev in
                config) compadd -- @CONFIG_VERBS@ ;;
                get|set|unset) compadd -- @CONFIG_KEYS@ ;;
            esac ;;
        trace|changes|show|annotate) compadd -- @KINDS@ ;;
    esac
}
compdef _kubetrail kubetrail kubectl-trail
`

// fileFlagWords are the flags whose value is a file name, as typed: --kubeconfig|--out|…|-f.
func fileFlagWords() string {
	var w []string
	for _, f := range fileFlags {
		if len(f) == 1 {
			w = append(w, "-"+f)
		} else {
			w = append(w, "--"+f)
		}
	}
	return strings.Join(w, "|")
}

// complete answers kubectl's plugin completion (cobra's __complete protocol): args are the
// words after "kubectl trail", the last the one being completed; one candidate a line, then
// ":" and the directive (cobra's ShellCompDirective: 0 the shell's files too, 2 no space after,
// 4 no files).
func complete(args []string, w io.Writer) int {
	const noSpace, noFiles = 2, 4
	if len(args) == 0 {
		args = []string{""}
	}
	cur, before := args[len(args)-1], args[:len(args)-1]
	v := vocabulary()
	var cands []string
	directive := noFiles
	cmd := "trace"
	if len(before) > 0 && slices.Contains(subcommands, before[0]) {
		cmd = before[0]
	}
	valuesOf := func(flag, prefix string) {
		name := strings.TrimLeft(flag, "-")
		if name == "o" {
			name = "output"
		}
		values := valueWords[name]
		if o, ok := outputsOf[cmd]; ok && name == "output" {
			values = o
		}
		switch {
		case slices.Contains(fileFlags, name):
			directive = 0
		case values != nil:
			for _, x := range values {
				cands = append(cands, prefix+x)
			}
			if name == "source" {
				directive |= noSpace
			}
		}
	}
	prev := ""
	if len(before) > 0 {
		prev = before[len(before)-1]
	}
	switch {
	case slices.Contains(v.valued, prev) && !strings.HasPrefix(cur, "-"):
		valuesOf(prev, "")
	case strings.HasPrefix(cur, "-") && strings.Contains(cur, "="):
		flag, _, _ := strings.Cut(cur, "=")
		valuesOf(flag, flag+"=")
	case strings.HasPrefix(cur, "-"):
		switch cmd {
		case "trace":
			cands = v.traceFlags
		case "changes":
			cands = v.changesFlags
		case "show":
			cands = v.showFlags
		case "serve":
			cands = v.serveFlags
		case "annotate":
			cands = v.annotateFlags
		case "apply":
			cands = v.applyFlags
		case "config":
			cands = v.configFlags
		}
	case len(before) == 0:
		cands = append(slices.Clone(subcommands), v.kinds...)
	case cmd == "completion":
		cands = []string{"bash", "zsh"}
	case cmd == "config":
		switch prev {
		case "config":
			cands = configVerbs
		case "get", "set", "unset":
			cands = configKeys
		}
	case cmd == "apply":
		// flags only: its files follow -f
	default:
		if !hasObject(before, v.valued) {
			cands = v.kinds
		}
	}
	for _, c := range cands {
		if strings.HasPrefix(c, cur) {
			fmt.Fprintln(w, c)
		}
	}
	fmt.Fprintf(w, ":%d\n", directive)
	return 0
}

// hasObject tells whether the words hold an argument: a word that is not the subcommand, not a
// flag and not a flag's value.
func hasObject(words, valued []string) bool {
	for i := 0; i < len(words); i++ {
		switch x := words[i]; {
		case i == 0 && slices.Contains(subcommands, x):
		case slices.Contains(valued, x):
			i++ // its value
		case strings.HasPrefix(x, "-"):
		default:
			return true
		}
	}
	return false
}
