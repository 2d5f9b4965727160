package main

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// rollout is how far an applied object is from its desired state, as the API tells it.
type rollout struct {
	done   bool
	failed bool   // it will not get there: a failed Job or Pod, a Deployment past its deadline
	lack   string // what it lacks ("2/3 ready"), or why it failed
}

// rolloutOf reads the object's status as `kubectl rollout status` and `kubectl wait` would; ok
// is false for kinds without a rule: those are ready once applied. The rules:
//   - Deployment: the controller observed the generation, and spec.replicas (default 1) are
//     updated, ready and available, with no old replica left; failed when its Progressing
//     condition says ProgressDeadlineExceeded.
//   - StatefulSet (RollingUpdate): observed, spec.replicas ready, and updated to the update
//     revision (with a partition, the replicas above it updated).
//   - DaemonSet (RollingUpdate): observed, every scheduled Pod updated and available.
//   - ReplicaSet, ReplicationController: observed, spec.replicas ready and available.
//   - Job: condition Complete True; failed when condition Failed True.
//   - Pod: condition Ready True, or phase Succeeded; failed in phase Failed.
func rolloutOf(obj *unstructured.Unstructured) (r rollout, ok bool) {
	kind := obj.GetKind()
	switch kind {
	case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ReplicationController":
		if g, og := obj.GetGeneration(), num(obj, "status", "observedGeneration"); og < g {
			return rollout{lack: fmt.Sprintf("generation %d not yet observed by its controller (observed %d)", g, og)}, true
		}
	}
	replicas := int64(1)
	if v, found, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "replicas"); found {
		replicas = toInt(v)
	}
	switch kind {
	case "Deployment":
		if c := condition(obj, "Progressing"); c.status == "False" && c.reason == "ProgressDeadlineExceeded" {
			return rollout{failed: true, lack: "progress deadline exceeded: " + c.message}, true
		}
		updated, ready := num(obj, "status", "updatedReplicas"), num(obj, "status", "readyReplicas")
		total, available := num(obj, "status", "replicas"), num(obj, "status", "availableReplicas")
		if r := lacking(count{updated, replicas, "updated"}, count{ready, replicas, "ready"}); !r.done {
			return r, true
		}
		if total > updated {
			return rollout{lack: fmt.Sprintf("%d old replicas pending termination", total-updated)}, true
		}
		return lacking(count{available, replicas, "available"}), true
	case "StatefulSet":
		if str(obj, "spec", "updateStrategy", "type") == "OnDelete" {
			return rollout{done: true}, true // nothing rolls out until Pods are deleted
		}
		ready, updated := num(obj, "status", "readyReplicas"), num(obj, "status", "updatedReplicas")
		if ready < replicas {
			return rollout{lack: fmt.Sprintf("%d/%d ready", ready, replicas)}, true
		}
		if p := num(obj, "spec", "updateStrategy", "rollingUpdate", "partition"); p > 0 {
			if updated < replicas-p {
				return rollout{lack: fmt.Sprintf("%d/%d updated above partition %d", updated, replicas-p, p)}, true
			}
			return rollout{done: true}, true
		}
		if cur, upd := str(obj, "status", "currentRevision"), str(obj, "status", "updateRevision"); upd != "" && cur != upd {
			return rollout{lack: fmt.Sprintf("%d/%d updated to revision %s", updated, replicas, upd)}, true
		}
		return rollout{done: true}, true
	case "DaemonSet":
		if str(obj, "spec", "updateStrategy", "type") == "OnDelete" {
			return rollout{done: true}, true
		}
		want := num(obj, "status", "desiredNumberScheduled")
		updated, available := num(obj, "status", "updatedNumberScheduled"), num(obj, "status", "numberAvailable")
		return lacking(count{updated, want, "updated"}, count{available, want, "available"}), true
	case "ReplicaSet", "ReplicationController":
		ready, available := num(obj, "status", "readyReplicas"), num(obj, "status", "availableReplicas")
		return lacking(count{ready, replicas, "ready"}, count{available, replicas, "available"}), true
	case "Job":
		if c := condition(obj, "Failed"); c.status == "True" {
			return rollout{failed: true, lack: "condition Failed True" + c.because()}, true
		}
		if condition(obj, "Complete").status == "True" {
			return rollout{done: true}, true
		}
		return rollout{lack: fmt.Sprintf("not complete: %d active, %d succeeded, %d failed",
			num(obj, "status", "active"), num(obj, "status", "succeeded"), num(obj, "status", "failed"))}, true
	case "Pod":
		phase := str(obj, "status", "phase")
		switch {
		case phase == "Failed":
			return rollout{failed: true, lack: "phase Failed" + condState{reason: str(obj, "status", "reason"), message: str(obj, "status", "message")}.because()}, true
		case condition(obj, "Ready").status == "True", phase == "Succeeded":
			return rollout{done: true}, true
		}
		lack := "not ready"
		if phase != "" {
			lack += ", phase " + phase
		}
		if w := waitingContainer(obj); w != "" {
			lack += ", " + w
		}
		return rollout{lack: lack}, true
	}
	return rollout{done: true}, false
}

// waitingContainer is the first container of a Pod that waits, and why: "container app waiting:
// ImagePullBackOff".
func waitingContainer(obj *unstructured.Unstructured) string {
	for _, field := range []string{"initContainerStatuses", "containerStatuses"} {
		list, _, _ := unstructured.NestedSlice(obj.Object, "status", field)
		for _, c := range list {
			m, _ := c.(map[string]any)
			if reason, _, _ := unstructured.NestedString(m, "state", "waiting", "reason"); reason != "" {
				name, _ := m["name"].(string)
				return "container " + name + " waiting: " + reason
			}
		}
	}
	return ""
}

type condState struct{ status, reason, message string }

func (c condState) because() string {
	var parts []string
	for _, p := range []string{c.reason, c.message} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ": ") + ")"
}

func condition(obj *unstructured.Unstructured, typ string) condState {
	list, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range list {
		m, _ := c.(map[string]any)
		if t, _ := m["type"].(string); t == typ {
			s, _ := m["status"].(string)
			r, _ := m["reason"].(string)
			msg, _ := m["message"].(string)
			return condState{status: s, reason: r, message: msg}
		}
	}
	return condState{}
}

func num(obj *unstructured.Unstructured, path ...string) int64 {
	v, _, _ := unstructured.NestedFieldNoCopy(obj.Object, path...)
	return toInt(v)
}

func toInt(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int:
		return int64(n)
	case float64:
		return int64(n)
	}
	return 0
}

func str(obj *unstructured.Unstructured, path ...string) string {
	s, _, _ := unstructured.NestedString(obj.Object, path...)
	return s
}

// count is one number a rollout waits for: have of want, named what ("ready").
type count struct {
	have, want int64
	what       string
}

// lacking is the first count below its want, as what the rollout lacks ("2/3 ready"); done
// when none is.
func lacking(counts ...count) rollout {
	for _, c := range counts {
		if c.have < c.want {
			return rollout{lack: fmt.Sprintf("%d/%d %s", c.have, c.want, c.what)}
		}
	}
	return rollout{done: true}
}
