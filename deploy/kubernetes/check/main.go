// Command check decodes Kubernetes manifests strictly with the projects' own Go types: every
// document of every file given, by its apiVersion and kind, into k8s.io/api, KEDA's apis or
// prometheus-operator's monitoring/v1. An unknown field, a field given twice or a value of the
// wrong type is an error naming the file, the document and the field; so is a kind it does not
// know. Exit status 1 when any document fails.
//
//	go run . FILE...
package main

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strings"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// kinds maps apiVersion/kind to a new value of its type.
var kinds = map[string]func() any{
	"apps/v1/StatefulSet":                    func() any { return &appsv1.StatefulSet{} },
	"v1/Service":                             func() any { return &corev1.Service{} },
	"v1/ConfigMap":                           func() any { return &corev1.ConfigMap{} },
	"policy/v1/PodDisruptionBudget":          func() any { return &policyv1.PodDisruptionBudget{} },
	"monitoring.coreos.com/v1/PodMonitor":    func() any { return &monitoringv1.PodMonitor{} },
	"keda.sh/v1alpha1/ScaledObject":          func() any { return &kedav1alpha1.ScaledObject{} },
	"keda.sh/v1alpha1/TriggerAuthentication": func() any { return &kedav1alpha1.TriggerAuthentication{} },
}

func main() {
	failed := 0
	for _, path := range os.Args[1:] {
		text, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			failed++
			continue
		}
		for i, doc := range bytes.Split(text, []byte("\n---\n")) {
			if err := check(doc); err != nil {
				fmt.Fprintf(os.Stderr, "%s, document %d: %v\n", path, i+1, err)
				failed++
			}
		}
	}
	if failed > 0 {
		os.Exit(1)
	}
}

func check(doc []byte) error {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return err
	}
	key := head.APIVersion + "/" + head.Kind
	newValue, ok := kinds[key]
	if !ok {
		known := make([]string, 0, len(kinds))
		for k := range kinds {
			known = append(known, k)
		}
		sort.Strings(known)
		return fmt.Errorf("kind %s is not one this check knows (%s)", key, strings.Join(known, ", "))
	}
	if err := yaml.UnmarshalStrict(doc, newValue()); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	fmt.Printf("ok %s\n", key)
	return nil
}
