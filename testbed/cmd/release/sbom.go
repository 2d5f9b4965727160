package main

import (
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"time"
)

// The SPDX 2.3 JSON document (spdx.github.io/spdx-spec/v2.3), the fields this SBOM fills.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name                  string            `json:"name"`
	SPDXID                string            `json:"SPDXID"`
	VersionInfo           string            `json:"versionInfo,omitempty"`
	PackageFileName       string            `json:"packageFileName,omitempty"`
	DownloadLocation      string            `json:"downloadLocation"`
	FilesAnalyzed         bool              `json:"filesAnalyzed"`
	Checksums             []spdxChecksum    `json:"checksums,omitempty"`
	PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
	ExternalRefs          []spdxExternalRef `json:"externalRefs,omitempty"`
	Comment               string            `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

type sbomOptions struct {
	version, commit, namespace string
	created                    time.Time
}

// sbom describes the binaries and the Go modules linked into each, as their build information
// records them (`go version -m`): module path, version (the replacement's, where one was used)
// and go.sum hash. The main modules and the modules replaced by a directory are this
// repository's, at the release's version. Every module is one package, whichever binaries hold
// it; each binary CONTAINS its modules and the Go standard library of its toolchain.
func sbom(o sbomOptions, binaries []string) (spdxDocument, error) {
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name: "kubetrail-" + o.version, DocumentNamespace: o.namespace,
		CreationInfo: spdxCreationInfo{Created: o.created.UTC().Format(time.RFC3339), Creators: []string{"Organization: kubetrail", "Tool: kubetrail-release-" + o.version}},
	}
	ids := map[string]bool{"SPDXRef-DOCUMENT": true}
	byKey := map[string]string{} // module path@version → SPDXID
	newID := func(prefix, name string) string {
		base := prefix + spdxIDUnsafe.ReplaceAllString(name, "-")
		id := base
		for i := 2; ids[id]; i++ {
			id = fmt.Sprintf("%s-%d", base, i)
		}
		ids[id] = true
		return id
	}
	module := func(path, version, sum, comment string) string {
		key := path + "@" + version
		if id, ok := byKey[key]; ok {
			return id
		}
		id := newID("SPDXRef-Module-", key)
		byKey[key] = id
		p := spdxPackage{Name: path, SPDXID: id, VersionInfo: version, DownloadLocation: "NOASSERTION", Comment: comment,
			ExternalRefs: []spdxExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl",
				ReferenceLocator: "pkg:golang/" + path + "@" + url.PathEscape(version)}}}
		if hexSum, ok := h1Hex(sum); ok {
			p.Checksums = []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: hexSum}}
			p.Comment = strings.TrimSpace(p.Comment + " The SHA256 checksum is the module's go.sum hash, " + sum + " (SHA-256 over the module's file hashes).")
		}
		doc.Packages = append(doc.Packages, p)
		return id
	}
	ours := func(path string) string {
		c := "Built from this repository"
		if o.commit != "" {
			c += " at commit " + o.commit
		}
		return module(path, o.version, "", c+".")
	}
	for _, b := range binaries {
		bi, err := buildinfo.ReadFile(b)
		if err != nil {
			return doc, fmt.Errorf("sbom: %s: %w", b, err)
		}
		sum, err := fileSHA256(b)
		if err != nil {
			return doc, err
		}
		goos, goarch := setting(bi, "GOOS"), setting(bi, "GOARCH")
		name := filepath.Base(b)
		binID := newID("SPDXRef-Binary-", name+"-"+goos+"-"+goarch)
		doc.Packages = append(doc.Packages, spdxPackage{
			Name: name, SPDXID: binID, VersionInfo: o.version, PackageFileName: name, DownloadLocation: "NOASSERTION",
			Checksums: []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: sum}}, PrimaryPackagePurpose: "APPLICATION",
			Comment: fmt.Sprintf("%s/%s, built with %s; main package %s.", goos, goarch, bi.GoVersion, bi.Path),
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", binID})
		contains := func(id string) {
			doc.Relationships = append(doc.Relationships, spdxRelationship{binID, "CONTAINS", id})
		}
		contains(ours(bi.Main.Path))
		contains(module("stdlib", bi.GoVersion, "", "The Go standard library of the toolchain that built the binary."))
		for _, d := range bi.Deps {
			contains(dependency(d, ours, module))
		}
	}
	return doc, nil
}

// dependency is the package of one dependency: the replacement's version and hash where one was
// used, this repository's where the replacement is a directory.
func dependency(d *debug.Module, ours func(string) string, module func(path, version, sum, comment string) string) string {
	switch {
	case d.Replace == nil:
		return module(d.Path, d.Version, d.Sum, "")
	case d.Replace.Version == "":
		return ours(d.Path)
	case d.Replace.Path == d.Path:
		return module(d.Path, d.Replace.Version, d.Replace.Sum, "Replaced by version "+d.Replace.Version+" (required: "+d.Version+").")
	default:
		return module(d.Replace.Path, d.Replace.Version, d.Replace.Sum, "Replaces "+d.Path+" "+d.Version+".")
	}
}

// spdxIDUnsafe is what an SPDX identifier cannot hold (it takes letters, digits, '.' and '-').
var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// h1Hex is a go.sum hash ("h1:" and base64 of a SHA-256) in hex.
func h1Hex(sum string) (string, bool) {
	b64, ok := strings.CutPrefix(sum, "h1:")
	if !ok {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(b) != 32 {
		return "", false
	}
	return hex.EncodeToString(b), true
}

func setting(bi *debug.BuildInfo, key string) string {
	for _, s := range bi.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}
