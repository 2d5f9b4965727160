package main

import (
	"slices"
	"strings"
	"unicode"
)

// A licence is recognised by phrases that its text (or the standard header pointing to it) always
// carries, compared after normalise: lower case, every run of punctuation and white space one
// space. So "Version 2.0," and "version 2.0" and a header re-wrapped behind "// " all read the
// same, and a phrase never matches across a word boundary it does not have.
type rule struct {
	id string
	// all of these phrases, and one of any (when any is set).
	all, any []string
}

// rules are tried in order; a text that carries several licences (a LICENSE that appends the
// licences of vendored code) gets every one it matches. The copyleft families come first
// because their texts mention each other: the AGPL and the LGPL name the GPL.
var rules = []rule{
	{id: "AGPL", any: []string{"gnu affero general public license"}},
	{id: "LGPL", any: []string{"gnu lesser general public license", "gnu library general public license"}},
	{id: "GPL", any: []string{"gnu general public license"}},
	{
		id:  "Apache-2.0",
		all: []string{"apache license", "version 2 0"},
		any: []string{
			"terms and conditions for use reproduction and distribution",
			"licensed under the apache license version 2 0",
		},
	},
	{
		id: "MIT",
		all: []string{
			"permission is hereby granted free of charge to any person obtaining a copy",
			"the above copyright notice and this permission notice shall be included",
		},
	},
	{
		id: "BSD",
		all: []string{
			"redistribution and use in source and binary forms with or without modification are permitted",
			"redistributions of source code must retain the above copyright notice",
		},
	},
	{
		id: "ISC",
		any: []string{
			"permission to use copy modify and or distribute this software for any purpose with or without fee is hereby granted",
			"permission to use copy modify and distribute this software for any purpose with or without fee is hereby granted",
		},
	},
	{id: "MPL-2.0", any: []string{"mozilla public license version 2 0", "mozilla public license v 2 0"}},
	{id: "Unlicense", all: []string{"this is free and unencumbered software released into the public domain"}},
	{
		id: "Zlib",
		all: []string{
			"this software is provided as is without any express or implied warranty",
			"altered source versions must be plainly marked as such",
		},
	},
	{id: "CC0-1.0", all: []string{"cc0 1 0 universal"}},
}

// secondaryLicenses is the MPL-2.0's definition of the licences it is compatible with. It is the
// only place a permissive or weak-copyleft text in the dependency graph names the GNU licences,
// so it is removed before the copyleft rules look: an MPL-2.0 module is not a GPL one.
var secondaryLicenses = normalise(`"Secondary License" means either the GNU General Public License,
Version 2.0, the GNU Lesser General Public License, Version 2.1, the GNU Affero General Public
License, Version 3.0, or any later versions of those licenses.`)

// Allowed are the licences a module may carry without review: permissive ones, and the MPL-2.0,
// whose file-level copyleft is met by shipping the unmodified source's licence (and which kubetrail
// links, never modifies).
var Allowed = map[string]bool{
	"Apache-2.0": true, "MIT": true, "BSD-2-Clause": true, "BSD-3-Clause": true, "ISC": true,
	"MPL-2.0": true, "Unlicense": true, "Zlib": true, "CC0-1.0": true,
}

// Unknown is the classification of a text that matches no rule.
const Unknown = "unknown"

// Classify names the licences a licence file's text carries, sorted, or [Unknown].
func Classify(text string) []string {
	n := " " + normalise(text) + " "
	if strings.Contains(n, " mozilla public license") {
		n = strings.ReplaceAll(n, secondaryLicenses, " ")
	}
	var found []string
	for _, r := range rules {
		if !r.matches(n) {
			continue
		}
		id := r.id
		switch id {
		case "BSD":
			id = bsdVariant(n)
		case "GPL", "LGPL", "AGPL":
			id += gnuVersion(n, r)
		}
		found = append(found, id)
	}
	// The AGPL's and the LGPL's own texts name the GPL; that is not a second licence.
	if slices.ContainsFunc(found, func(id string) bool {
		return strings.HasPrefix(id, "AGPL") || strings.HasPrefix(id, "LGPL")
	}) {
		found = slices.DeleteFunc(found, func(id string) bool { return strings.HasPrefix(id, "GPL") })
	}
	if len(found) == 0 {
		return []string{Unknown}
	}
	slices.Sort(found)
	return slices.Compact(found)
}

func (r rule) matches(n string) bool {
	for _, p := range r.all {
		if !strings.Contains(n, " "+p+" ") {
			return false
		}
	}
	if len(r.any) == 0 {
		return true
	}
	for _, p := range r.any {
		if strings.Contains(n, " "+p+" ") {
			return true
		}
	}
	return false
}

// bsdVariant tells the BSD licences apart by the clauses after the first two: the 3-clause one
// forbids using the names of the authors to endorse, the 4-clause one also asks for an
// advertising acknowledgement (which the Apache-2.0 cannot carry along).
func bsdVariant(n string) string {
	switch {
	case strings.Contains(n, " all advertising materials mentioning features or use of this software "):
		return "BSD-4-Clause"
	case strings.Contains(n, " endorse or promote products derived from this software "):
		return "BSD-3-Clause"
	}
	return "BSD-2-Clause"
}

// gnuVersion finds the version a GNU licence text or header names right after the licence's name
// ("... General Public License, Version 3", "... General Public License as published by the Free
// Software Foundation, either version 2 ..."), as "-2.0", "-2.1", "-3.0", or "" when it names none.
func gnuVersion(n string, r rule) string {
	for _, name := range r.any {
		i := strings.Index(n, " "+name+" ")
		if i < 0 {
			continue
		}
		rest := strings.Fields(n[i+len(name)+2:])
		for j := 0; j+1 < len(rest) && j < 16; j++ {
			if rest[j] != "version" {
				continue
			}
			switch v := rest[j+1]; v {
			case "2", "3":
				if j+2 < len(rest) && rest[j+2] == "1" {
					return "-" + v + ".1"
				}
				return "-" + v + ".0"
			}
		}
	}
	return ""
}

// normalise lower-cases text and makes every run of characters other than letters and digits
// one space, so that layout, quotes, comment markers and punctuation never decide a match.
func normalise(text string) string {
	var b strings.Builder
	b.Grow(len(text))
	space := true
	for _, c := range strings.ToLower(text) {
		if unicode.IsLetter(c) || unicode.IsDigit(c) {
			b.WriteRune(c)
			space = false
			continue
		}
		if !space {
			b.WriteByte(' ')
			space = true
		}
	}
	return strings.TrimSpace(b.String())
}
