package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Every flag of `mesh node` and `mesh coord`, and the flags of the other
// subcommands that declare one, falls back to an environment variable.
// The variable is named once: derived from the flag's name (bindEnv: the
// command's prefix, then the name in upper case with "-" as "_"), or
// declared beside the flag where it differs (envVar). The help text
// names it (bindEnv appends it), and applyEnv reads it, parsed as the
// flag parses its value: a boolean takes true, false, 1 or 0 (the forms
// strconv.ParseBool reads), and anything malformed stops the command
// with an error naming the variable.

// Annotations a flag carries.
const (
	envKey       = "mesh-env"       // its environment variable
	unlimitedKey = "mesh-unlimited" // a rate, budget or quota whose 0 is unlimited
)

// envVar declares the environment variable of flag name of f.
func envVar(f *pflag.FlagSet, name, variable string) {
	if err := f.SetAnnotation(name, envKey, []string{variable}); err != nil {
		panic(err) // a flag name mistyped in the source
	}
}

// zeroUnlimited marks the named flags of f as rates, budgets or quotas
// whose 0 is unlimited; documentEnv says so in their help, once for all.
func zeroUnlimited(f *pflag.FlagSet, names ...string) {
	for _, name := range names {
		if err := f.SetAnnotation(name, unlimitedKey, []string{"true"}); err != nil {
			panic(err)
		}
	}
}

// bindEnv gives every flag of f that has none the variable prefix +
// NAME, except hidden and deprecated ones (aliases of another flag), and
// completes each flag's help (documentEnv).
func bindEnv(f *pflag.FlagSet, prefix string) {
	f.VisitAll(func(fl *pflag.Flag) {
		if fl.Hidden || fl.Deprecated != "" {
			return
		}
		if envOf(fl) == "" {
			envVar(f, fl.Name, prefix+strings.ToUpper(strings.ReplaceAll(fl.Name, "-", "_")))
		}
	})
	documentEnv(f)
}

// documentEnv completes the help of each flag of f: "0 is unlimited"
// where it is (zeroUnlimited), then its variable, if it has one.
func documentEnv(f *pflag.FlagSet) {
	f.VisitAll(func(fl *pflag.Flag) {
		if _, ok := fl.Annotations[unlimitedKey]; ok {
			fl.Usage += "; 0 is unlimited"
		}
		if v := envOf(fl); v != "" {
			fl.Usage += " (env " + v + ")"
		}
	})
}

// envOf is the variable of fl, "" when it has none.
func envOf(fl *pflag.Flag) string {
	if v := fl.Annotations[envKey]; len(v) == 1 {
		return v[0]
	}
	return ""
}

// declareEnv declares the variables of the named flags of f (flag name
// to variable) and documents them: for a command where only some flags
// have one.
func declareEnv(f *pflag.FlagSet, vars map[string]string) {
	for name, v := range vars {
		envVar(f, name, v)
	}
	documentEnv(f)
}

// applyEnvHook applies the environment to a command's flags before it
// runs (cobra's PreRunE): each command that has variables sets it.
func applyEnvHook(cmd *cobra.Command, _ []string) error { return applyEnv(cmd.Flags()) }

// applyEnv sets each flag of f that has a variable and that the command
// line left out from that variable, when it is set, so that the command
// line wins over the environment and the environment over the defaults.
func applyEnv(f *pflag.FlagSet) error {
	var err error
	f.VisitAll(func(fl *pflag.Flag) {
		v := envOf(fl)
		val, set := os.LookupEnv(v)
		if err != nil || v == "" || !set || fl.Changed {
			return
		}
		if fl.Value.Type() == "bool" {
			if _, perr := strconv.ParseBool(val); perr != nil {
				err = fmt.Errorf("%s=%q: want true or false (1 or 0)", v, val)
				return
			}
		}
		if serr := fl.Value.Set(val); serr != nil {
			err = fmt.Errorf("%s=%q: %w", v, val, serr)
		}
	})
	return err
}

// zeroInf is a float64 flag whose 0 stands for +Inf, no limit: for a
// rate of a Config whose 0 takes the default.
type zeroInf float64

func (z *zeroInf) Type() string { return "float64" }

func (z *zeroInf) String() string {
	if math.IsInf(float64(*z), 1) {
		return "0"
	}
	return strconv.FormatFloat(float64(*z), 'g', -1, 64)
}

func (z *zeroInf) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return err
	}
	if v == 0 {
		v = math.Inf(1)
	}
	*z = zeroInf(v)
	return nil
}
