// Command clientgo drives a shardplane server with client-go's typed clientset, which sends
// protobuf request bodies (application/vnd.kubernetes.protobuf) for built-in kinds. It performs
// creates, updates, a status update, and deletes with DeleteOptions, and prints every object the
// server returned as one JSON line: {"step": ..., "object": ...}. The Rust test compares them with
// what the same writes produce as JSON.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func emit(step string, obj interface{}) {
	b, err := json.Marshal(map[string]interface{}{"step": step, "object": obj})
	must(err)
	fmt.Println(string(b))
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "clientgo:", err)
		os.Exit(1)
	}
}

func main() {
	cfg := &rest.Config{Host: os.Args[1]}
	// client-go's typed clients send protobuf by default; make it explicit so the test cannot
	// silently fall back to JSON.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cs, err := kubernetes.NewForConfig(cfg)
	must(err)
	ctx := context.Background()
	ns := "clientgo"

	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(err)

	cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cm", Labels: map[string]string{"app": "demo"}, Annotations: map[string]string{"note": ""}},
		Data:       map[string]string{"a": "1", "empty": ""},
		BinaryData: map[string][]byte{"bin": {0, 1, 2, 255}},
	}, metav1.CreateOptions{})
	must(err)
	emit("create-configmap", cm)
	cm.Data["a"] = "2"
	cm, err = cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
	must(err)
	emit("update-configmap", cm)

	replicas := int32(2)
	d, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &intstr.IntOrString{Type: intstr.String, StrVal: "25%"}}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "web", Image: "nginx:1.27",
					Ports: []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP}},
				}}},
			},
		},
	}, metav1.CreateOptions{})
	must(err)
	emit("create-deployment", d)
	zero := int32(0)
	d.Spec.Replicas = &zero
	d, err = cs.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
	must(err)
	emit("update-deployment", d)
	d.Status.Replicas = 3
	d.Status.ObservedGeneration = d.Generation
	d, err = cs.AppsV1().Deployments(ns).UpdateStatus(ctx, d, metav1.UpdateOptions{})
	must(err)
	emit("update-deployment-status", d)

	holder := "me"
	duration := int32(15)
	now := metav1.NewMicroTime(metav1.Now().Time)
	l, err := cs.CoordinationV1().Leases(ns).Create(ctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "lock"}, Spec: coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &duration, RenewTime: &now}}, metav1.CreateOptions{})
	must(err)
	emit("create-lease", l)

	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
	}}, metav1.CreateOptions{})
	must(err)
	emit("create-service", svc)

	// A delete whose uid precondition does not match must fail with a Conflict.
	wrong := metav1.Preconditions{UID: func() *types.UID { u := types.UID("wrong"); return &u }()}
	err = cs.CoreV1().ConfigMaps(ns).Delete(ctx, "cm", metav1.DeleteOptions{Preconditions: &wrong})
	emit("delete-configmap-wrong-uid", map[string]string{"error": fmt.Sprint(err)})
	uid := cm.UID
	policy := metav1.DeletePropagationForeground
	must(cs.CoreV1().ConfigMaps(ns).Delete(ctx, "cm", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &policy}))
	// Foreground: the object stays, with the foregroundDeletion finalizer, until the garbage
	// collector has found no dependent and removed it (as upstream).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err = cs.CoreV1().ConfigMaps(ns).Get(ctx, "cm", metav1.GetOptions{})
		if err != nil || time.Now().After(deadline) {
			break
		}
	}
	emit("get-deleted-configmap", map[string]string{"error": fmt.Sprint(err)})
}
